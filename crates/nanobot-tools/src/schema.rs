//! Schema-driven argument handling: casting (`"120"` → `120`), validation with messages the
//! model can act on (`timeout must be <= 600`), and schemas derived from args structs.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use nanobot_types::ToolSpec;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::ToolError;
use crate::tool::{Tool, ToolContext, ToolOutput};
use crate::validate::Validator;

const BOOL_TRUE: [&str; 4] = ["true", "1", "yes", "on"];
const BOOL_FALSE: [&str; 4] = ["false", "0", "no", "off"];

/// The JSON Schema of `T`, inlined (no `$ref`s/`definitions`) and cleaned for providers: no
/// `$schema`, `title`, `format` or `default: null`, and the `["T", "null"]` type of an optional field
/// reduced to `"T"` unless the field is declared nullable with `#[schemars(extend("nullable" = true))]`: then
/// its type is `["T", "null"]`, the way the Python nanobot declares the parameters a model may send as
/// `null` (the marker itself is not kept). Whether declared nullable or not, `null` for an optional
/// parameter is accepted and treated as absent (see [`ArgsSchema::prepare`]).
///
/// ```
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args {
///     /// Which one.
///     #[schemars(extend("nullable" = true))]
///     occurrence: Option<u64>,
///     /// How many.
///     limit: Option<u64>,
/// }
/// let s = nanobot_tools::schema_for::<Args>();
/// assert_eq!(s["properties"]["occurrence"]["type"], serde_json::json!(["integer", "null"]));
/// assert_eq!(s["properties"]["limit"]["type"], "integer");
/// assert!(s["properties"]["occurrence"].get("nullable").is_none());
/// ```
pub fn schema_for<T: JsonSchema>() -> Value {
    let settings = schemars::generate::SchemaSettings::draft07().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let mut value = settings.into_generator().into_root_schema_for::<T>().to_value();
    clean_schema(&mut value, true);
    if let Value::Object(map) = &mut value {
        map.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    value
}

fn clean_schema(value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            // The field's own declaration: `extend("nullable" = true)` keeps (or adds) `null` in its type.
            let nullable = map.shift_remove("nullable") == Some(Value::Bool(true));
            // Option<T> of a complex T: `anyOf: [T, {type: null}]` → T
            if let Some(Value::Array(variants)) = map.get("anyOf") {
                let non_null: Vec<&Value> = variants
                    .iter()
                    .filter(|v| v.get("type").and_then(Value::as_str) != Some("null"))
                    .collect();
                if non_null.len() == 1
                    && non_null.len() < variants.len()
                    && let Value::Object(inner) = non_null[0].clone()
                {
                    map.remove("anyOf");
                    for (k, v) in inner {
                        map.entry(k).or_insert(v);
                    }
                }
            }
            // documented unit enums: `oneOf: [{const, description}, …]` → `enum`
            if let Some(Value::Array(variants)) = map.get("oneOf")
                && !variants.is_empty()
                && variants.iter().all(|v| v.get("const").is_some())
            {
                let values: Vec<Value> = variants.iter().filter_map(|v| v.get("const").cloned()).collect();
                map.remove("oneOf");
                if values.iter().all(Value::is_string) {
                    map.insert("type".into(), Value::from("string"));
                }
                map.insert("enum".into(), Value::Array(values));
            }
            map.remove("$schema");
            map.remove("format");
            if root {
                map.remove("title");
            }
            // `#[serde(default)]` on an `Option` makes schemars declare `default: null`, which says nothing.
            if map.get("default").is_some_and(Value::is_null) {
                map.shift_remove("default");
            }
            if let Some(Value::Array(types)) = map.get("type") {
                let non_null: Vec<Value> = types
                    .iter()
                    .filter(|t| t.as_str() != Some("null"))
                    .cloned()
                    .collect();
                if non_null.len() == 1 {
                    map.insert("type".into(), non_null[0].clone());
                }
            }
            if nullable {
                add_null_type(map);
            }
            // `enum` of an Option<enum> carries a `null` the model should not see.
            if let Some(Value::Array(options)) = map.get_mut("enum") {
                options.retain(|o| !o.is_null());
            }
            for (key, child) in map.iter_mut() {
                if key == "properties" {
                    if let Value::Object(props) = child {
                        for prop in props.values_mut() {
                            clean_schema(prop, false);
                        }
                    }
                } else {
                    clean_schema(child, false);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| clean_schema(v, false)),
        _ => {}
    }
}

/// Deserialises validated arguments into `T`.
pub fn parse_args<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

fn primary_type(schema: &Value) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

/// Casts `value` towards the types `schema` declares, the way the Python nanobot does before
/// validating: numeric strings become numbers, `"true"`/`"false"` (and `yes`/`no`, `1`/`0`)
/// become booleans, recursively through objects and arrays. Values that cannot be cast are left
/// alone for validation to report.
pub fn cast_value(value: Value, schema: &Value) -> Value {
    let Some(t) = primary_type(schema) else {
        return value;
    };
    match (t, value) {
        ("integer", Value::String(s)) => match s.trim().parse::<i64>() {
            Ok(n) => Value::from(n),
            Err(_) => Value::String(s),
        },
        ("number", Value::String(s)) => match s.trim().parse::<f64>() {
            Ok(n) if n.is_finite() => serde_json::Number::from_f64(n)
                .map(Value::Number)
                .unwrap_or(Value::String(s)),
            _ => Value::String(s),
        },
        ("integer", Value::Number(n)) if n.as_i64().is_none() && n.as_u64().is_none() => {
            // 5.0 → 5; 5.5 stays for validation to reject.
            match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
                _ => Value::Number(n),
            }
        }
        ("boolean", Value::String(s)) => {
            let low = s.trim().to_ascii_lowercase();
            if BOOL_TRUE.contains(&low.as_str()) {
                Value::Bool(true)
            } else if BOOL_FALSE.contains(&low.as_str()) {
                Value::Bool(false)
            } else {
                Value::String(s)
            }
        }
        ("string", v @ (Value::Number(_) | Value::Bool(_))) => Value::String(v.to_string()),
        ("array", Value::Array(items)) => match schema.get("items") {
            Some(item_schema) => {
                Value::Array(items.into_iter().map(|v| cast_value(v, item_schema)).collect())
            }
            None => Value::Array(items),
        },
        ("array", Value::String(s)) if s.trim_start().starts_with('[') => {
            match serde_json::from_str::<Value>(&s) {
                Ok(v @ Value::Array(_)) => cast_value(v, schema),
                _ => Value::String(s),
            }
        }
        ("object", Value::Object(map)) => Value::Object(cast_object(map, schema)),
        ("object", Value::String(s)) if s.trim_start().starts_with('{') => {
            match serde_json::from_str::<Value>(&s) {
                Ok(Value::Object(map)) => Value::Object(cast_object(map, schema)),
                _ => Value::String(s),
            }
        }
        (_, v) => v,
    }
}

fn cast_object(map: Map<String, Value>, schema: &Value) -> Map<String, Value> {
    let props = schema.get("properties").and_then(Value::as_object);
    map.into_iter()
        .map(|(k, v)| {
            let v = match props.and_then(|p| p.get(&k)) {
                Some(s) => cast_value(v, s),
                None => v,
            };
            (k, v)
        })
        .collect()
}

/// Whether `schema` lets a value be `null`, as the Python nanobot reads it: a type that lists `"null"`,
/// `nullable: true` (the form MCP schemas are normalised to), a `null` branch of `anyOf`/`oneOf`, or no
/// type at all. A nullable type admits `null` whatever its `enum` lists (0.3.5 checks nullability first).
fn admits_null(schema: &Value) -> bool {
    let Value::Object(map) = schema else {
        return schema.as_bool().unwrap_or(true);
    };
    if map.get("nullable") == Some(&Value::Bool(true)) {
        return true;
    }
    match map.get("type") {
        Some(Value::String(t)) => return t == "null",
        Some(Value::Array(types)) => return types.iter().any(|t| t == "null"),
        _ => {}
    }
    if let Some(Value::Array(branches)) = map.get("anyOf").or_else(|| map.get("oneOf")) {
        return branches.iter().any(admits_null);
    }
    if let Some(Value::Array(options)) = map.get("enum") {
        return options.iter().any(Value::is_null);
    }
    map.get("const").is_none_or(Value::is_null)
}

/// Drops the `null`s of optional parameters (declared in `properties`, not `required`): a model that fills
/// every parameter sends `null` for what it means to omit. A `null` the parameter's schema admits
/// ([`admits_null`]) stays, for a tool that tells `null` from absent (an MCP server's); the others go, so that
/// `null` is never refused where omitting the parameter would not be. Recurses through declared properties and
/// array items.
fn omit_nulls(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            let required = |name: &str| {
                schema
                    .get("required")
                    .and_then(Value::as_array)
                    .is_some_and(|r| r.iter().any(|k| k == name))
            };
            map.retain(|name, v| {
                !v.is_null()
                    || required(name)
                    || !props.contains_key(name)
                    || props.get(name).is_some_and(admits_null)
            });
            for (name, v) in map.iter_mut() {
                if let Some(prop) = props.get(name) {
                    omit_nulls(v, prop);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                items.iter_mut().for_each(|v| omit_nulls(v, item_schema));
            }
        }
        _ => {}
    }
}

/// `schema` as the validator reads it: a schema that admits `null` by `nullable: true` (which JSON Schema does not
/// know) lists `"null"` among its types, and a nullable type with an `enum` has `null` among its options, so that
/// the validator accepts the `null`s [`admits_null`] lets through.
fn validation_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    admit_declared_nulls(&mut schema);
    schema
}

/// Adds `"null"` to a schema's `type` (`"T"` → `["T", "null"]`); a schema without a type admits it already.
fn add_null_type(map: &mut Map<String, Value>) {
    match map.get_mut("type") {
        Some(Value::String(t)) => {
            let t = Value::String(std::mem::take(t));
            map.insert("type".into(), Value::Array(vec![t, Value::from("null")]));
        }
        Some(Value::Array(types)) if !types.iter().any(|t| t == "null") => types.push(Value::from("null")),
        _ => {}
    }
}

fn admit_declared_nulls(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if map.remove("nullable") == Some(Value::Bool(true)) {
        add_null_type(map);
    }
    let typed_nullable =
        matches!(map.get("type"), Some(Value::Array(types)) if types.iter().any(|t| t == "null"));
    if typed_nullable
        && let Some(Value::Array(options)) = map.get_mut("enum")
        && !options.iter().any(Value::is_null)
    {
        options.push(Value::Null);
    }
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            // maps of name → schema
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                if let Value::Object(children) = child {
                    children.values_mut().for_each(admit_declared_nulls);
                }
            }
            // data, not schemas
            "enum" | "const" | "default" | "examples" | "required" => {}
            _ => match child {
                Value::Array(items) => items.iter_mut().for_each(admit_declared_nulls),
                other => admit_declared_nulls(other),
            },
        }
    }
}

/// An argument schema: casts, then validates with model-friendly messages. The validator is compiled on the
/// first call (a start-up registers every tool, a turn calls few).
#[derive(Debug)]
pub struct ArgsSchema {
    schema: Schema,
    validator: OnceLock<Result<Validator, String>>,
}

/// Where an [`ArgsSchema`]'s schema lives.
#[derive(Debug)]
enum Schema {
    Own(Value),
    /// A registered tool's: its spec's `parameters`, kept once for the requests and the checks.
    Spec(Arc<ToolSpec>),
}

impl ArgsSchema {
    /// Keeps `schema`; it is compiled on first use. An invalid schema is kept and reported on every call.
    pub fn new(schema: Value) -> Self {
        Self {
            schema: Schema::Own(schema),
            validator: OnceLock::new(),
        }
    }

    /// The arguments of `spec`, sharing its `parameters` instead of copying them (the registry keeps each
    /// tool's schema once).
    pub fn of_spec(spec: Arc<ToolSpec>) -> Self {
        Self {
            schema: Schema::Spec(spec),
            validator: OnceLock::new(),
        }
    }

    /// Whether the validator has been compiled yet.
    pub fn is_compiled(&self) -> bool {
        self.validator.get().is_some()
    }

    fn validator(&self) -> &Result<Validator, String> {
        self.validator
            .get_or_init(|| Validator::new(&validation_schema(self.schema())))
    }

    /// The schema as given.
    pub fn schema(&self) -> &Value {
        match &self.schema {
            Schema::Own(schema) => schema,
            Schema::Spec(spec) => &spec.parameters,
        }
    }

    /// Casts then validates `args` (`null` counts as `{}`). Unknown fields are ignored, unless the schema
    /// closes its object. `null` for an optional parameter is accepted: it is dropped (treated as absent),
    /// or kept where the parameter's schema admits `null` (a type listing `"null"`, `nullable: true`).
    /// On failure returns the list of problems, e.g. `["timeout must be <= 600"]`.
    pub fn prepare(&self, args: Value) -> Result<Value, Vec<String>> {
        // Casting and validation recurse over the value: refuse deep nesting first, without recursion.
        let depth = nanobot_types::json_limits::value_depth(&args);
        if depth > nanobot_types::json_limits::MAX_ARGUMENT_DEPTH {
            return Err(vec![format!(
                "parameters are nested {depth} levels deep; the limit is {}",
                nanobot_types::json_limits::MAX_ARGUMENT_DEPTH
            )]);
        }
        let args = match args {
            Value::Null => Value::Object(Map::new()),
            Value::Object(map) => {
                let schema = self.schema();
                let mut args = Value::Object(cast_object(map, schema));
                omit_nulls(&mut args, schema);
                args
            }
            other => {
                return Err(vec![format!(
                    "parameters must be an object, got {}",
                    json_type_name(&other)
                )]);
            }
        };
        let validator = match self.validator() {
            Ok(v) => v,
            Err(e) => return Err(vec![format!("the tool's parameter schema is invalid: {e}")]),
        };
        let mut errors = validator.errors(&args);
        if errors.is_empty() {
            Ok(args)
        } else {
            errors.dedup();
            Err(errors)
        }
    }
}

fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A tool whose schema is derived from an args struct (`schemars`) and whose arguments arrive
/// deserialised. Every `TypedTool` is a [`Tool`].
///
/// ```
/// use nanobot_tools::{TypedTool, ToolContext, ToolError, ToolOutput};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Args {
///     /// Who to greet.
///     name: String,
/// }
///
/// struct Greet;
///
/// #[async_trait::async_trait]
/// impl TypedTool for Greet {
///     type Args = Args;
///     fn name(&self) -> &str { "greet" }
///     fn description(&self) -> &str { "Greets someone." }
///     async fn call(&self, args: Args, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
///         Ok(ToolOutput::text(format!("hello {}", args.name)))
///     }
/// }
/// let schema = nanobot_tools::Tool::parameters(&Greet);
/// assert_eq!(schema["required"][0], "name");
/// ```
#[async_trait]
pub trait TypedTool: Send + Sync {
    /// The arguments; their schema is what the model sees.
    type Args: JsonSchema + DeserializeOwned + Send;

    /// See [`Tool::name`].
    fn name(&self) -> &str;

    /// See [`Tool::description`].
    fn description(&self) -> &str;

    /// See [`Tool::read_only`].
    fn read_only(&self) -> bool {
        false
    }

    /// See [`Tool::exclusive`].
    fn exclusive(&self) -> bool {
        false
    }

    /// See [`Tool::effects`] (same default).
    fn effects(&self, args: &Value) -> crate::Effects {
        let _ = args;
        if self.read_only() {
            crate::Effects::none()
        } else {
            crate::Effects::opaque(self.name())
        }
    }

    /// Runs the tool with deserialised arguments.
    async fn call(&self, args: Self::Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;

    /// See [`Tool::stop_session`].
    async fn stop_session(&self, _session_key: &str) -> usize {
        0
    }

    /// See [`Tool::shutdown`].
    async fn shutdown(&self) {}
}

#[async_trait]
impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        TypedTool::name(self)
    }

    fn description(&self) -> &str {
        TypedTool::description(self)
    }

    fn parameters(&self) -> Value {
        schema_for::<T::Args>()
    }

    fn read_only(&self) -> bool {
        TypedTool::read_only(self)
    }

    fn effects(&self, args: &Value) -> crate::Effects {
        TypedTool::effects(self, args)
    }

    fn exclusive(&self) -> bool {
        TypedTool::exclusive(self)
    }

    async fn execute(&self, mut args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        // A parameter sent as `null` is absent, also to fields that are not `Option`s (a call through the registry
        // had its `null`s judged by the schema already). No schema is built per call: for typed arguments a
        // `null` and an absent field read alike, except where absent means a default.
        if let Value::Object(map) = &mut args {
            map.retain(|_, v| !v.is_null());
        }
        let args: T::Args = parse_args(args)?;
        self.call(args, ctx).await
    }

    async fn stop_session(&self, session_key: &str) -> usize {
        TypedTool::stop_session(self, session_key).await
    }

    async fn shutdown(&self) {
        TypedTool::shutdown(self).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exec_schema() -> ArgsSchema {
        ArgsSchema::new(json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1},
                "timeout": {"type": "integer", "minimum": 1, "maximum": 600},
                "flag": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "nested": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
                "list": {"type": "array", "items": {"type": "number"}, "maxItems": 2}
            },
            "required": ["command"]
        }))
    }

    #[test]
    fn validator_compiled_on_first_use_and_invalid_schema_reported_each_call() {
        let s = exec_schema();
        assert!(!s.is_compiled(), "compiled at construction");
        assert!(s.prepare(json!({})).is_err());
        assert!(s.is_compiled());
        let bad = ArgsSchema::new(json!({"type": "object", "properties": {"n": {"type": 12}}}));
        for _ in 0..2 {
            let err = bad.prepare(json!({"n": 1})).unwrap_err();
            assert!(err[0].contains("schema is invalid"), "{err:?}");
        }
    }

    #[test]
    fn casts_strings_to_schema_types() {
        let s = exec_schema();
        let out = s
            .prepare(json!({"command": "ls", "timeout": "120", "flag": "TRUE",
                            "nested": {"n": "7"}, "list": ["1.5", 2], "unknown": "kept"}))
            .unwrap();
        assert_eq!(out["timeout"], 120);
        assert_eq!(out["flag"], true);
        assert_eq!(out["nested"]["n"], 7);
        assert_eq!(out["list"], json!([1.5, 2]));
        assert_eq!(out["unknown"], "kept");
    }

    #[test]
    fn reports_python_style_messages() {
        let s = exec_schema();
        let err = s.prepare(json!({"command": "ls", "timeout": 999})).unwrap_err();
        assert_eq!(err, vec!["timeout must be <= 600"]);
        let err = s.prepare(json!({"timeout": 0})).unwrap_err();
        assert!(err.contains(&"missing required command".to_owned()), "{err:?}");
        assert!(err.contains(&"timeout must be >= 1".to_owned()), "{err:?}");
        let err = s.prepare(json!({"command": "", "mode": "c"})).unwrap_err();
        assert!(
            err.contains(&"command must be at least 1 chars".to_owned()),
            "{err:?}"
        );
        assert!(
            err.iter().any(|e| e.starts_with("mode must be one of")),
            "{err:?}"
        );
        let err = s.prepare(json!({"command": "x", "nested": {}})).unwrap_err();
        assert_eq!(err, vec!["missing required nested.n"]);
        let err = s.prepare(json!({"command": "x", "list": ["a"]})).unwrap_err();
        assert_eq!(err, vec!["list[0] should be number"]);
        let err = s.prepare(json!({"command": "x", "flag": "maybe"})).unwrap_err();
        assert_eq!(err, vec!["flag should be boolean"]);
        let err = s.prepare(json!([1])).unwrap_err();
        assert_eq!(err, vec!["parameters must be an object, got array"]);
    }

    #[test]
    fn null_args_are_an_empty_object() {
        let s = ArgsSchema::new(json!({"type": "object", "properties": {}}));
        assert_eq!(s.prepare(Value::Null).unwrap(), json!({}));
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// The path.
        path: String,
        /// Max lines.
        #[schemars(range(min = 1))]
        limit: Option<u32>,
    }

    #[test]
    fn derived_schema_is_clean() {
        let s = schema_for::<Args>();
        assert_eq!(s["type"], "object");
        assert_eq!(s["required"], json!(["path"]));
        assert_eq!(s["properties"]["limit"]["type"], "integer");
        assert_eq!(s["properties"]["path"]["description"], "The path.");
        assert!(s.get("title").is_none() && s.get("$schema").is_none());
        assert!(s["properties"]["limit"].get("format").is_none());
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Optional {
        /// Declared nullable.
        #[schemars(range(min = 1), extend("nullable" = true))]
        which: Option<u64>,
        /// Nullable with a default.
        #[serde(default)]
        #[schemars(extend("nullable" = true, "default" = false))]
        login: Option<bool>,
        /// Not nullable, `#[serde(default)]` on an `Option`.
        #[serde(default)]
        pages: Option<String>,
        /// Not an `Option`.
        #[serde(default)]
        close: bool,
    }

    #[test]
    fn nullable_fields_keep_null_in_their_type_and_default_null_is_dropped() {
        let s = schema_for::<Optional>();
        let p = &s["properties"];
        assert_eq!(
            p["which"],
            json!({"type": ["integer", "null"], "minimum": 1, "description": "Declared nullable."})
        );
        assert_eq!(p["login"]["type"], json!(["boolean", "null"]));
        assert_eq!(p["login"]["default"], false);
        assert_eq!(
            p["pages"],
            json!({"type": "string", "description": "Not nullable, `#[serde(default)]` on an `Option`."})
        );
        assert_eq!(p["close"]["default"], false);
        assert!(s.get("required").is_none_or(|r| r == &json!([])), "{s}");
    }

    #[test]
    fn null_for_an_optional_parameter_is_absent() {
        let s = ArgsSchema::new(schema_for::<Optional>());
        let out = s
            .prepare(json!({"which": null, "login": null, "pages": null, "close": null}))
            .unwrap();
        // Declared nullable: passed on; otherwise dropped.
        assert_eq!(out, json!({"which": null, "login": null}));
        let args: Optional = parse_args(out).unwrap();
        assert!(args.which.is_none() && args.login.is_none() && !args.close);
        // A required parameter stays required.
        let s = exec_schema();
        assert_eq!(
            s.prepare(json!({"command": null, "timeout": null, "nested": null}))
                .unwrap_err(),
            vec!["command should be string"]
        );
        let out = s
            .prepare(json!({"command": "ls", "nested": {"n": 1}, "list": null}))
            .unwrap();
        assert_eq!(out, json!({"command": "ls", "nested": {"n": 1}}));
    }

    struct Probe;

    #[async_trait]
    impl TypedTool for Probe {
        type Args = Optional;
        fn name(&self) -> &str {
            "probe"
        }
        fn description(&self) -> &str {
            "probe"
        }
        async fn call(&self, args: Optional, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text(format!("{:?} {}", args.which, args.close)))
        }
    }

    #[tokio::test]
    async fn a_typed_tool_called_directly_parses_null_as_absent() {
        let out = Tool::execute(
            &Probe,
            json!({"which": null, "close": null}),
            &ToolContext::new("/tmp"),
        )
        .await
        .unwrap();
        assert_eq!(out.text, "None false");
    }
}
