//! `cron`: the tool that schedules reminders and recurring tasks, bound to the calling chat (the `cron`
//! feature).

use async_trait::async_trait;
use nanobot_cron::{CronPayload, CronSchedule, CronService, NewJob, ScheduleArgs};
use nanobot_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

use super::turn_info::turn_info;
use crate::rights::owns_job;

/// What the `cron` tool should do.
#[derive(Debug, Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CronAction {
    /// Schedule a new job.
    Add,
    /// List the jobs.
    List,
    /// Remove a job by id.
    Remove,
}

/// Arguments of `cron` (0.3.5's parameters, and `deliver`).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct CronArgs {
    /// add, list or remove.
    pub action: CronAction,
    /// What the agent should do when the job fires (for add).
    pub message: Option<String>,
    /// Run every N seconds (for recurring tasks).
    pub every_seconds: Option<i64>,
    /// A 5-field cron expression such as '0 9 * * MON-FRI' (for scheduled tasks).
    pub cron_expr: Option<String>,
    /// IANA time zone for cron_expr, e.g. 'Europe/Berlin'.
    pub tz: Option<String>,
    /// ISO date-time for a one-time task, e.g. '2026-02-12T10:30:00'.
    pub at: Option<String>,
    /// Job id (for remove).
    pub job_id: Option<String>,
    /// A short name for the job.
    pub name: Option<String>,
    /// Send the result to this chat (default true).
    pub deliver: Option<bool>,
}

/// `cron`: schedules reminders and recurring tasks, bound to the calling chat.
#[derive(Debug, Clone)]
pub(crate) struct CronTool {
    service: CronService,
}

impl CronTool {
    /// A `cron` tool over `service`.
    pub(crate) fn new(service: CronService) -> Self {
        Self { service }
    }
}

fn cron_err(e: nanobot_cron::CronError) -> ToolError {
    ToolError::Failed(e.to_string())
}

#[async_trait]
impl TypedTool for CronTool {
    type Args = CronArgs;

    fn name(&self) -> &str {
        "cron"
    }

    /// Adding a job schedules unattended work (what it will say, as the user would read it); listing and
    /// removing do not.
    fn effects(&self, args: &serde_json::Value) -> nanobot_tools::Effects {
        if args.get("action").and_then(serde_json::Value::as_str) != Some("add") {
            return nanobot_tools::Effects::none();
        }
        let message = args
            .get("message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let when = ["cron_expr", "every_seconds", "at"]
            .iter()
            .find_map(|k| args.get(*k).filter(|v| !v.is_null()).map(|v| format!("{k}={v}")))
            .unwrap_or_default();
        nanobot_tools::Effects::none().with_schedule(format!("{when}: {message}"))
    }

    fn description(&self) -> &str {
        "Schedule reminders and recurring tasks. Actions: add (with message and one of every_seconds, cron_expr \
         [+ tz] or at), list, remove (with job_id). Jobs belong to and report back to this chat."
    }

    async fn call(&self, args: CronArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let tz = self.service.default_tz();
        match args.action {
            CronAction::List => {
                let mut jobs = self.service.list().map_err(cron_err)?;
                jobs.retain(|j| owns_job(j, &ctx.channel, &ctx.chat_id, &ctx.session_key));
                if jobs.is_empty() {
                    return Ok(ToolOutput::text("No scheduled jobs."));
                }
                let lines: Vec<String> = jobs.iter().map(|j| j.describe(tz)).collect();
                Ok(ToolOutput::text(format!("Scheduled jobs:\n{}", lines.join("\n"))))
            }
            CronAction::Remove => {
                let id = args
                    .job_id
                    .filter(|s| !s.trim().is_empty())
                    .ok_or_else(|| ToolError::InvalidArguments("job_id is required for remove".into()))?;
                let id = id.trim();
                // A chat removes only its own jobs; another chat's job is reported as not found (its id
                // reveals nothing).
                let owned = self.service.list().map_err(cron_err)?.iter().any(|j| {
                    j.id == id
                        && (j.is_protected() || owns_job(j, &ctx.channel, &ctx.chat_id, &ctx.session_key))
                });
                if !owned {
                    return Err(cron_err(nanobot_cron::CronError::NotFound { id: id.to_owned() }));
                }
                let job = self.service.remove(id).map_err(cron_err)?;
                Ok(ToolOutput::text(format!(
                    "Removed job '{}' ({})",
                    job.name, job.id
                )))
            }
            CronAction::Add => {
                if turn_info(ctx).is_some_and(|i| i.is_cron) {
                    return Err(ToolError::Failed(
                        "cannot schedule new jobs from within a cron job (this prevents feedback loops)"
                            .into(),
                    ));
                }
                let message = args
                    .message
                    .filter(|m| !m.trim().is_empty())
                    .ok_or_else(|| ToolError::InvalidArguments("message is required for add".into()))?;
                if ctx.channel.is_empty() || ctx.chat_id.is_empty() {
                    return Err(ToolError::Failed("no chat to bind the job to".into()));
                }
                let schedule = CronSchedule::from_args(
                    &ScheduleArgs {
                        every_seconds: args.every_seconds,
                        cron_expr: args.cron_expr,
                        tz: args.tz,
                        at: args.at,
                    },
                    tz,
                )
                .map_err(cron_err)?;
                // Written as 0.3.5 writes a job: bound to the session and origin chat, with the older
                // delivery fields (`deliver`, `channel`, `to`) left empty; only `deliver: false` asked
                // explicitly is kept in the old form (0.3.5 has no such option).
                let mut payload = CronPayload::agent_turn(message);
                if args.deliver == Some(false) {
                    payload.channel = Some(ctx.channel.clone());
                    payload.to = Some(ctx.chat_id.clone());
                }
                payload.session_key = (!ctx.session_key.is_empty()).then(|| ctx.session_key.clone());
                payload.origin_channel = Some(ctx.channel.clone());
                payload.origin_chat_id = Some(ctx.chat_id.clone());
                if let Some(info) = turn_info(ctx) {
                    payload.origin_metadata = info.metadata.clone();
                }
                let mut new = NewJob::new(schedule, payload);
                if let Some(n) = args.name {
                    new = new.with_name(n);
                }
                let job = self.service.add(new).map_err(cron_err)?;
                Ok(ToolOutput::text(format!(
                    "Created job '{}' (id: {})\n{}",
                    job.name,
                    job.id,
                    job.describe(tz)
                )))
            }
        }
    }
}
