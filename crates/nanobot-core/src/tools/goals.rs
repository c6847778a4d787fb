//! Sustained goals, as nanobot 0.3.5 has them: `/goal <task>` starts a turn that may record one objective for the
//! session (`create_goal`); while it is active, every turn of the session is shown the objective, and a turn
//! that runs out of tool iterations is continued by an internal turn (at most [`MAX_CONTINUATION_ROUNDS`] in a
//! row) instead of stopping; `update_goal` completes, cancels, blocks or replaces it.
//!
//! The goal lives in the session's metadata under `goal_state` (0.3.5's key and fields; its older key
//! `thread_goal` is read too). Only a turn the user started with `/goal` may create or replace a goal: an
//! instruction the model reads elsewhere cannot start sustained work.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use nanobot_sessions::SessionStore;
use nanobot_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::turn_info::turn_info;

/// The session metadata key of the goal.
pub(crate) const GOAL_STATE_KEY: &str = "goal_state";
/// Older builds of 0.3.5 kept the goal under this key.
const LEGACY_GOAL_STATE_KEY: &str = "thread_goal";
/// How many internal turns continue an active goal in a row.
pub(crate) const MAX_CONTINUATION_ROUNDS: u64 = 12;
/// The session metadata key counting them (0.3.5's).
pub(crate) const CONTINUATION_ROUNDS_KEY: &str = "_sustained_goal_continuation_rounds";
/// The marker of an internal continuation message (inbound metadata and the stored user message).
pub(crate) const CONTINUATION_MARK: &str = "_internal_continuation";
/// The sender id of continuation turns.
pub(crate) const CONTINUATION_SENDER: &str = "system:continuation";
/// The longest objective.
pub(crate) const MAX_OBJECTIVE_CHARS: usize = 4000;
const MAX_SUMMARY_CHARS: usize = 120;

const CREATE_REFUSED: &str = "create_goal is not available in this turn: ask the user to send the whole objective \
                              as `/goal <task>`.";
const REPLACE_REFUSED: &str = "replacing the goal is not available in this turn: ask the user to send the new \
                               objective as `/goal <task>`.";

/// The goal recorded in session metadata, if any (either key; a JSON string is read too).
pub(crate) fn goal_state(metadata: &Map<String, Value>) -> Option<Map<String, Value>> {
    let raw = match metadata.get(GOAL_STATE_KEY) {
        Some(v) => v,
        None => metadata.get(LEGACY_GOAL_STATE_KEY)?,
    };
    match raw {
        Value::Object(m) => Some(m.clone()),
        Value::String(s) => match serde_json::from_str(s) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        },
        _ => None,
    }
}

/// Whether the session has an active goal.
pub(crate) fn goal_active(metadata: &Map<String, Value>) -> bool {
    goal_state(metadata).is_some_and(|g| g.get("status").and_then(Value::as_str) == Some("active"))
}

fn text_of(goal: &Map<String, Value>, field: &str) -> String {
    goal.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The lines that show an active goal (runtime context, continuation prompt); empty without one.
pub(crate) fn goal_lines(metadata: &Map<String, Value>) -> Vec<String> {
    let Some(goal) = goal_state(metadata).filter(|_| goal_active(metadata)) else {
        return Vec::new();
    };
    let objective = text_of(&goal, "objective");
    if objective.is_empty() {
        return vec!["Goal: active (no objective text stored).".to_owned()];
    }
    let mut out = vec![
        "Goal (active):".to_owned(),
        crate::text::truncate_chars(&objective, MAX_OBJECTIVE_CHARS),
    ];
    let summary = text_of(&goal, "ui_summary");
    if !summary.is_empty() {
        out.push(format!("Summary: {summary}"));
    }
    out
}

/// The runtime-context notes of a turn: how to work on a goal (when this turn started one with `/goal` or one is
/// active), and the active goal.
pub(crate) fn goal_notes(metadata: &Map<String, Value>, requested: bool) -> Vec<String> {
    let active = goal_active(metadata);
    if !requested && !active {
        return Vec::new();
    }
    let mut guidance = String::from("[Goal guidance from nanobot]\n");
    if requested {
        guidance.push_str(
            "The user started this turn with /goal. Once the outcome they want is clear, record it with \
             create_goal before long planning or work. Write the objective so it still holds when re-read in \
             the middle of the work: the end state and how to tell it is reached, every path, name, version \
             and count that matters, what is in and out of scope, and steps that are safe to repeat. Keep \
             ui_summary a short label. If something essential is unclear, ask one short question and ask the \
             user to send the clarified task as /goal <task>. Do not stack goals.\n",
        );
    }
    guidance.push_str(
        "Work toward the active goal with the ordinary tools; it does not override safety or the user's \
         constraints. Check facts that may have changed before building on them. Call update_goal with \
         action='complete' only once the objective is reached and verified; 'cancel' when the user cancels, \
         'block' when you genuinely cannot go on, 'replace' only when the objective itself changes.\n\
         [/Goal guidance]",
    );
    let mut notes = vec![guidance];
    notes.extend(goal_lines(metadata));
    notes
}

/// The message of an internal turn that continues an active goal after a turn ran out of tool iterations.
pub(crate) fn continuation_prompt(metadata: &Map<String, Value>) -> String {
    let goal = goal_lines(metadata).join("\n");
    format!(
        "Continue the active goal: the previous turn used up its tool iterations.\n\n{goal}\n\nGo on from where \
         the work stands, without mentioning this pause to the user. Call update_goal with action='complete' \
         when the objective is truly finished."
    )
}

fn now() -> String {
    chrono::Local::now()
        .naive_local()
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}

/// What the goal tools share: the session store.
#[derive(Debug, Clone)]
pub(crate) struct GoalTools {
    store: SessionStore,
}

impl GoalTools {
    /// Goal tools writing into `store`'s session metadata.
    pub(crate) fn new(store: SessionStore) -> Self {
        Self { store }
    }

    async fn metadata(&self, ctx: &ToolContext) -> Result<Map<String, Value>, ToolError> {
        if ctx.session_key.is_empty() {
            return Err(ToolError::Failed("goals need a chat session".into()));
        }
        self.store
            .metadata(&ctx.session_key)
            .await
            .map_err(|e| ToolError::Failed(format!("session store: {e}")))
    }

    async fn save(&self, ctx: &ToolContext, goal: Value, reset_rounds: bool) -> Result<(), ToolError> {
        self.store
            .update_header(&ctx.session_key, move |h| {
                h.metadata.insert(GOAL_STATE_KEY.into(), goal);
                h.metadata.remove(LEGACY_GOAL_STATE_KEY);
                if reset_rounds {
                    h.metadata.remove(CONTINUATION_ROUNDS_KEY);
                }
            })
            .await
            .map(drop)
            .map_err(|e| ToolError::Failed(format!("session store: {e}")))
    }
}

/// Whether this turn was started by the user's `/goal` and has not closed a goal since.
fn may_set_goal(ctx: &ToolContext) -> bool {
    turn_info(ctx).is_some_and(|i| i.goal_allowed.load(Ordering::SeqCst))
}

fn objective_text(objective: &str) -> Result<String, ToolError> {
    let text = objective.trim();
    if text.is_empty() {
        return Err(ToolError::InvalidArguments("objective must not be empty".into()));
    }
    if text.chars().count() > MAX_OBJECTIVE_CHARS {
        return Err(ToolError::InvalidArguments(format!(
            "objective must not exceed {MAX_OBJECTIVE_CHARS} characters"
        )));
    }
    Ok(text.to_owned())
}

/// The longest recap `update_goal` takes (0.3.5's limit).
const MAX_RECAP_CHARS: usize = 8000;

fn summary_text(summary: Option<&str>) -> String {
    summary
        .unwrap_or_default()
        .trim()
        .chars()
        .take(MAX_SUMMARY_CHARS)
        .collect()
}

/// Arguments of `create_goal` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct CreateGoalArgs {
    /// The objective this session works toward: self-contained, bounded, safe to repeat, and clear about when
    /// it is done (it may gather a plan from the conversation).
    // Lengths are checked in the call, not declared: a local server building a grammar from the schema (as
    // llama-cpp-python does) crashes on limits of thousands of characters.
    pub objective: String,
    /// An optional one-line label for lists and logs; nothing depends on it.
    #[schemars(extend("nullable" = true))]
    pub ui_summary: Option<String>,
}

/// `create_goal`: records the session's sustained goal (only in a turn the user started with `/goal`).
#[derive(Debug, Clone)]
pub(crate) struct CreateGoalTool(pub GoalTools);

#[async_trait]
impl TypedTool for CreateGoalTool {
    type Args = CreateGoalArgs;

    fn name(&self) -> &str {
        "create_goal"
    }

    fn effects(&self, _args: &serde_json::Value) -> nanobot_tools::Effects {
        nanobot_tools::Effects::none()
    }

    fn description(&self) -> &str {
        "Record the sustained goal of this conversation when the goal guidance asks for it (the user sent \
         /goal). Gather what was discussed into one objective that is self-contained, bounded, safe to repeat \
         and clear about when it is done. Do not call it again after it succeeded."
    }

    async fn call(&self, args: CreateGoalArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let metadata = self.0.metadata(ctx).await?;
        if !may_set_goal(ctx) {
            return Err(ToolError::Failed(CREATE_REFUSED.into()));
        }
        if goal_active(&metadata) {
            return Err(ToolError::Failed(
                "a goal is already active: use update_goal with action='replace' only if the user changes the \
                 objective"
                    .into(),
            ));
        }
        let objective = objective_text(&args.objective)?;
        let summary = summary_text(args.ui_summary.as_deref());
        let goal = json!({
            "status": "active",
            "objective": objective,
            "ui_summary": summary,
            "started_at": now(),
        });
        self.0.save(ctx, goal, true).await?;
        let extra = if summary.is_empty() {
            String::new()
        } else {
            format!("\nSummary line: {summary}")
        };
        Ok(ToolOutput::text(format!(
            "Goal recorded. Keep working toward it with the ordinary tools; when it is fully done and verified, \
             call update_goal with action='complete'.{extra}"
        )))
    }
}

/// What `update_goal` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum GoalAction {
    /// The objective is reached and verified.
    Complete,
    /// The user cancelled it.
    Cancel,
    /// Progress is genuinely blocked.
    Block,
    /// The objective changed (needs a `/goal` turn).
    Replace,
}

/// Arguments of `update_goal` (0.3.5's parameters).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct UpdateGoalArgs {
    /// What to do with the active goal.
    pub action: GoalAction,
    /// A short, honest recap for the user (expected for complete, cancel and block).
    #[schemars(extend("nullable" = true))]
    pub recap: Option<String>,
    /// The new objective; only for action 'replace'.
    #[schemars(extend("nullable" = true))]
    pub objective: Option<String>,
    /// An optional one-line label for the new objective.
    #[schemars(extend("nullable" = true))]
    pub ui_summary: Option<String>,
}

/// `update_goal`: completes, cancels, blocks or replaces the active goal.
#[derive(Debug, Clone)]
pub(crate) struct UpdateGoalTool(pub GoalTools);

#[async_trait]
impl TypedTool for UpdateGoalTool {
    type Args = UpdateGoalArgs;

    fn name(&self) -> &str {
        "update_goal"
    }

    fn effects(&self, _args: &serde_json::Value) -> nanobot_tools::Effects {
        nanobot_tools::Effects::none()
    }

    fn description(&self) -> &str {
        "Update the active goal: 'complete' only once the objective is reached and verified, 'cancel' when the \
         user cancels, 'block' when progress is genuinely blocked, 'replace' only when the objective changes."
    }

    async fn call(&self, args: UpdateGoalArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let metadata = self.0.metadata(ctx).await?;
        let Some(prior) = goal_state(&metadata).filter(|_| goal_active(&metadata)) else {
            return Ok(ToolOutput::text("No active goal to update."));
        };
        let recap = args.recap.as_deref().unwrap_or_default().trim().to_owned();
        if recap.chars().count() > MAX_RECAP_CHARS {
            return Err(ToolError::InvalidArguments(format!(
                "recap must be at most {MAX_RECAP_CHARS} characters"
            )));
        }
        if args.action == GoalAction::Replace {
            if !may_set_goal(ctx) {
                return Err(ToolError::Failed(REPLACE_REFUSED.into()));
            }
            let objective = objective_text(args.objective.as_deref().unwrap_or_default()).map_err(|_| {
                ToolError::InvalidArguments(format!(
                    "action 'replace' needs the new objective (1 to {MAX_OBJECTIVE_CHARS} characters)"
                ))
            })?;
            let summary = summary_text(args.ui_summary.as_deref());
            let at = now();
            let goal = json!({
                "status": "active",
                "objective": objective,
                "ui_summary": summary,
                "started_at": at,
                "replaced_at": at,
                "previous_objective": text_of(&prior, "objective"),
                "recap": recap,
            });
            self.0.save(ctx, goal, true).await?;
            let extra = if summary.is_empty() {
                String::new()
            } else {
                format!("\nSummary line: {summary}")
            };
            return Ok(ToolOutput::text(format!(
                "Goal replaced. Go on toward the new objective with the ordinary tools.{extra}"
            )));
        }
        let (status, label) = match args.action {
            GoalAction::Complete => ("completed", "complete"),
            GoalAction::Cancel => ("cancelled", "cancelled"),
            _ => ("blocked", "blocked"),
        };
        let ended = now();
        let mut goal = prior;
        goal.insert("status".into(), json!(status));
        goal.insert("ended_at".into(), json!(ended));
        goal.insert("recap".into(), json!(recap));
        if args.action == GoalAction::Complete {
            goal.insert("completed_at".into(), json!(ended));
        }
        self.0.save(ctx, Value::Object(goal), false).await?;
        // A closed goal cannot be reopened by the rest of this turn.
        if let Some(info) = turn_info(ctx) {
            info.goal_allowed.store(false, Ordering::SeqCst);
        }
        Ok(ToolOutput::text(if recap.is_empty() {
            format!("Goal marked {label} ({ended}).")
        } else {
            format!("Goal marked {label} ({ended}). Recap:\n{recap}")
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_are_read_from_either_key_and_from_json_text() {
        let mut m = Map::new();
        assert!(!goal_active(&m));
        m.insert(
            LEGACY_GOAL_STATE_KEY.into(),
            json!(r#"{"status":"active","objective":"ship it"}"#),
        );
        assert!(goal_active(&m));
        assert_eq!(goal_lines(&m), ["Goal (active):", "ship it"]);
        m.insert(
            GOAL_STATE_KEY.into(),
            json!({"status": "completed", "objective": "x"}),
        );
        assert!(!goal_active(&m), "the current key wins");
        assert!(goal_notes(&m, false).is_empty());
        assert!(goal_notes(&m, true)[0].contains("create_goal"));
    }
}
