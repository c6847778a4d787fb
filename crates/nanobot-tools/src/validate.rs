//! Validation of a tool call's arguments against the tool's JSON Schema, with messages the model can act on, in
//! the Python nanobot 0.3.5's words (`timeout must be <= 600`, `missing required path`).
//!
//! 0.3.5 validates the keywords tool schemas use (`type`, `enum`, `minimum`/`maximum`, `minLength`/`maxLength`,
//! `properties`/`required`/`additionalProperties`, `items`, `minItems`/`maxItems`) and ignores the rest. This
//! validator checks those and the rest of JSON Schema's assertions that schemas of MCP servers carry: `const`,
//! the exclusive bounds, `multipleOf`, `pattern`, `prefixItems` and the array form of `items`, `uniqueItems`,
//! `contains`, `patternProperties`, `minProperties`/`maxProperties`, `allOf`/`anyOf`/`oneOf`/`not`,
//! `if`/`then`/`else`, and `$ref` within the schema (`#/$defs/…`, `#/definitions/…`, `#`). What it does not check
//! is passed, as 0.3.5 passes it: `format`, references to other documents, and a `pattern` the `regex` crate
//! cannot compile (look-around; the tool sees the value and judges it). A schema whose keywords have the wrong
//! shape (`"type": 12`) is refused when compiled, and the tool call with it.
//!
//! It replaces the `jsonschema` crate, whose subtree (its own regex engines, big-number arithmetic, URI and
//! e-mail parsers) was about a megabyte of every program for the part tool arguments use.

use regex::Regex;
use serde_json::{Map, Number, Value};

/// How many schemas one value may be checked against in all (combinators multiply them) before the check gives
/// up.
const MAX_STEPS: usize = 100_000;
/// How deep `$ref`s and combinators may nest while checking one value before the schema is taken to refer to
/// itself without end (the value's own nesting is bounded before it gets here).
const MAX_DEPTH: usize = 256;

/// A JSON type, as `type` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Boolean,
    Integer,
    Number,
    String,
    Array,
    Object,
}

impl Kind {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "null" => Self::Null,
            "boolean" => Self::Boolean,
            "integer" => Self::Integer,
            "number" => Self::Number,
            "string" => Self::String,
            "array" => Self::Array,
            "object" => Self::Object,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Boolean => "boolean",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::String => "string",
            Self::Array => "array",
            Self::Object => "object",
        }
    }

    fn admits(self, value: &Value) -> bool {
        match (self, value) {
            (Self::Null, Value::Null)
            | (Self::Boolean, Value::Bool(_))
            | (Self::Number, Value::Number(_))
            | (Self::String, Value::String(_))
            | (Self::Array, Value::Array(_))
            | (Self::Object, Value::Object(_)) => true,
            (Self::Integer, Value::Number(n)) => is_integer(n),
            _ => false,
        }
    }
}

/// JSON Schema's integer: a number without a fraction (`1.0` counts).
fn is_integer(n: &Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// A numeric limit: its value for comparing, and the number as written for the message.
#[derive(Debug, Clone)]
struct Limit {
    value: f64,
    shown: Number,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    Minimum,
    Maximum,
    ExclusiveMinimum,
    ExclusiveMaximum,
}

/// What an object allows besides its `properties` and `patternProperties`.
#[derive(Debug, Clone, Copy)]
enum Additional {
    None,
    Schema(usize),
}

/// One compiled schema.
#[derive(Debug, Default)]
struct Node {
    /// `true` / `false` as a schema: accepts everything / nothing.
    accepts_nothing: bool,
    types: Option<Vec<Kind>>,
    enumeration: Option<(Vec<Value>, String)>,
    constant: Option<Value>,
    bounds: Vec<(Bound, Limit)>,
    multiple_of: Option<Limit>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    pattern: Option<(Regex, String)>,
    items: Option<usize>,
    prefix_items: Vec<usize>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    unique_items: bool,
    contains: Option<usize>,
    properties: Vec<(String, usize)>,
    pattern_properties: Vec<(Regex, usize)>,
    additional: Option<Additional>,
    required: Vec<String>,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    all_of: Vec<usize>,
    any_of: Vec<usize>,
    one_of: Vec<usize>,
    not: Option<usize>,
    condition: Option<(usize, Option<usize>, Option<usize>)>,
    reference: Option<usize>,
}

/// A compiled argument schema.
#[derive(Debug)]
pub(crate) struct Validator {
    nodes: Vec<Node>,
}

struct Compiler<'a> {
    root: &'a Value,
    nodes: Vec<Node>,
    /// JSON pointers of `$ref` targets already compiled (or being compiled), and their nodes.
    refs: Vec<(String, usize)>,
}

fn bad(at: &str, what: impl std::fmt::Display) -> String {
    if at.is_empty() {
        format!("the schema's {what}")
    } else {
        format!("{at}: {what}")
    }
}

fn count(map: &Map<String, Value>, key: &str, at: &str) -> Result<Option<u64>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                    .map(|f| f as u64)
            })
            .map(Some)
            .ok_or_else(|| bad(at, format!("{key} must be a non-negative integer"))),
    }
}

fn limit(map: &Map<String, Value>, key: &str, at: &str) -> Result<Option<Limit>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64().map(|value| Limit {
            value,
            shown: n.clone(),
        })),
        Some(_) => Err(bad(at, format!("{key} must be a number"))),
    }
}

/// The value `pointer` (`#/$defs/x`) points at in `root`.
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    let decoded = percent_decode(pointer);
    if decoded.is_empty() {
        return Some(root);
    }
    root.pointer(&decoded)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Compiler<'_> {
    fn add(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn schemas(&mut self, map: &Map<String, Value>, key: &str, at: &str) -> Result<Vec<usize>, String> {
        match map.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(list)) => list
                .iter()
                .enumerate()
                .map(|(i, s)| self.compile(s, &format!("{at}/{key}/{i}")))
                .collect(),
            Some(_) => Err(bad(at, format!("{key} must be an array of schemas"))),
        }
    }

    fn schema(&mut self, map: &Map<String, Value>, key: &str, at: &str) -> Result<Option<usize>, String> {
        map.get(key)
            .map(|s| self.compile(s, &format!("{at}/{key}")))
            .transpose()
    }

    fn compile(&mut self, schema: &Value, at: &str) -> Result<usize, String> {
        let map = match schema {
            Value::Bool(true) => return Ok(self.add(Node::default())),
            Value::Bool(false) => {
                return Ok(self.add(Node {
                    accepts_nothing: true,
                    ..Node::default()
                }));
            }
            Value::Object(map) => map,
            _ => return Err(bad(at, "is not a schema (an object or a boolean)")),
        };
        let id = self.add(Node::default());
        let mut node = Node::default();
        if let Some(t) = map.get("type") {
            let names: Vec<&Value> = match t {
                Value::Array(list) => list.iter().collect(),
                other => vec![other],
            };
            let kinds = names
                .iter()
                .map(|n| n.as_str().and_then(Kind::parse))
                .collect::<Option<Vec<Kind>>>()
                .ok_or_else(|| bad(at, format!("type {t} names no JSON type")))?;
            node.types = Some(kinds);
        }
        if let Some(e) = map.get("enum") {
            let Value::Array(options) = e else {
                return Err(bad(at, "enum must be an array"));
            };
            node.enumeration = Some((options.clone(), e.to_string()));
        }
        node.constant = map.get("const").cloned();
        for (key, bound) in [
            ("minimum", Bound::Minimum),
            ("maximum", Bound::Maximum),
            ("exclusiveMinimum", Bound::ExclusiveMinimum),
            ("exclusiveMaximum", Bound::ExclusiveMaximum),
        ] {
            // Draft 4's boolean exclusive bounds turn `minimum`/`maximum` exclusive.
            if let Some(Value::Bool(exclusive)) = map.get(key) {
                let (plain, strict) = match bound {
                    Bound::ExclusiveMinimum => (Bound::Minimum, Bound::ExclusiveMinimum),
                    _ => (Bound::Maximum, Bound::ExclusiveMaximum),
                };
                for (b, _) in node.bounds.iter_mut().filter(|(b, _)| *exclusive && *b == plain) {
                    *b = strict;
                }
                continue;
            }
            if let Some(l) = limit(map, key, at)? {
                node.bounds.push((bound, l));
            }
        }
        node.multiple_of = limit(map, "multipleOf", at)?.filter(|l| l.value > 0.0);
        node.min_length = count(map, "minLength", at)?;
        node.max_length = count(map, "maxLength", at)?;
        if let Some(p) = map.get("pattern") {
            let p = p.as_str().ok_or_else(|| bad(at, "pattern must be a string"))?;
            // A pattern the regex crate cannot compile (look-around, back-references) is not checked.
            node.pattern = Regex::new(p).ok().map(|r| (r, p.to_owned()));
        }
        match map.get("items") {
            Some(Value::Array(_)) => node.prefix_items = self.schemas(map, "items", at)?,
            Some(_) => node.items = self.schema(map, "items", at)?,
            None => {}
        }
        if map.contains_key("prefixItems") {
            node.prefix_items = self.schemas(map, "prefixItems", at)?;
        }
        if node.items.is_none() && !node.prefix_items.is_empty() {
            node.items = self.schema(map, "additionalItems", at)?;
        }
        node.min_items = count(map, "minItems", at)?;
        node.max_items = count(map, "maxItems", at)?;
        node.unique_items = map.get("uniqueItems") == Some(&Value::Bool(true));
        node.contains = self.schema(map, "contains", at)?;
        if let Some(props) = map.get("properties") {
            let Value::Object(props) = props else {
                return Err(bad(at, "properties must be an object"));
            };
            for (name, s) in props {
                let child = self.compile(s, &format!("{at}/properties/{name}"))?;
                node.properties.push((name.clone(), child));
            }
        }
        if let Some(Value::Object(patterns)) = map.get("patternProperties") {
            for (p, s) in patterns {
                let child = self.compile(s, &format!("{at}/patternProperties/{p}"))?;
                if let Ok(r) = Regex::new(p) {
                    node.pattern_properties.push((r, child));
                }
            }
        }
        node.additional = match map.get("additionalProperties") {
            None | Some(Value::Bool(true)) => None,
            Some(Value::Bool(false)) => Some(Additional::None),
            Some(s) => Some(Additional::Schema(
                self.compile(s, &format!("{at}/additionalProperties"))?,
            )),
        };
        if let Some(r) = map.get("required") {
            node.required = r
                .as_array()
                .and_then(|names| names.iter().map(|n| n.as_str().map(str::to_owned)).collect())
                .ok_or_else(|| bad(at, "required must be an array of names"))?;
        }
        node.min_properties = count(map, "minProperties", at)?;
        node.max_properties = count(map, "maxProperties", at)?;
        node.all_of = self.schemas(map, "allOf", at)?;
        node.any_of = self.schemas(map, "anyOf", at)?;
        node.one_of = self.schemas(map, "oneOf", at)?;
        node.not = self.schema(map, "not", at)?;
        if let Some(condition) = self.schema(map, "if", at)? {
            node.condition = Some((
                condition,
                self.schema(map, "then", at)?,
                self.schema(map, "else", at)?,
            ));
        }
        if let Some(r) = map.get("$ref") {
            let r = r.as_str().ok_or_else(|| bad(at, "$ref must be a string"))?;
            node.reference = self.reference(r, at)?;
        }
        self.nodes[id] = node;
        Ok(id)
    }

    /// The node of a `$ref` within this schema; `None` (not checked) for another document.
    fn reference(&mut self, r: &str, at: &str) -> Result<Option<usize>, String> {
        if !r.starts_with('#') {
            return Ok(None);
        }
        if let Some((_, id)) = self.refs.iter().find(|(p, _)| p == r) {
            return Ok(Some(*id));
        }
        let target = resolve(self.root, r).ok_or_else(|| bad(at, format!("$ref {r} points at nothing")))?;
        // Registered before compiling, so a schema that refers to itself ends.
        let id = self.add(Node::default());
        self.refs.push((r.to_owned(), id));
        let compiled = self.compile(target, r)?;
        self.nodes[id].reference = Some(compiled);
        Ok(Some(id))
    }
}

/// Where a value is, as the messages name it: `timeout`, `nested.n`, `list[0]`.
fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn index_path(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn number_of(value: &Value) -> Option<f64> {
    value.as_f64()
}

/// JSON equality with numbers compared by value (`1` equals `1.0`), as JSON Schema's `enum`, `const` and
/// `uniqueItems` compare.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || (x.as_f64().is_some() && x.as_f64() == y.as_f64()),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

struct Run<'a> {
    nodes: &'a [Node],
    steps: usize,
    depth: usize,
    /// A limit was reached: the value is refused whatever else was found.
    exhausted: bool,
    errors: Vec<String>,
}

impl Run<'_> {
    fn passes(&mut self, id: usize, value: &Value) -> bool {
        let before = self.errors.len();
        self.check(id, value, "");
        let ok = self.errors.len() == before;
        self.errors.truncate(before);
        ok
    }

    fn check(&mut self, id: usize, value: &Value, path: &str) {
        self.steps += 1;
        if self.steps > MAX_STEPS || self.depth >= MAX_DEPTH {
            self.exhausted = true;
            return;
        }
        self.depth += 1;
        self.check_node(id, value, path);
        self.depth -= 1;
    }

    fn check_node(&mut self, id: usize, value: &Value, path: &str) {
        let nodes = self.nodes;
        let node = &nodes[id];
        let label = if path.is_empty() { "parameter" } else { path };
        if node.accepts_nothing {
            self.errors.push(format!("{label} is not allowed"));
            return;
        }
        if let Some(target) = node.reference {
            self.check(target, value, path);
        }
        if let Some(types) = &node.types
            && !types.iter().any(|k| k.admits(value))
        {
            let names: Vec<&str> = types.iter().map(|k| k.name()).collect();
            self.errors
                .push(format!("{label} should be {}", names.join(" or ")));
        }
        if let Some((options, shown)) = &node.enumeration
            && !options.iter().any(|o| equal(o, value))
        {
            self.errors.push(format!("{label} must be one of {shown}"));
        }
        if let Some(c) = &node.constant
            && !equal(c, value)
        {
            self.errors.push(format!("{label} must be {c}"));
        }
        match value {
            Value::Number(_) => self.check_number(node, value, label),
            Value::String(s) => self.check_string(node, s, label),
            Value::Array(items) => self.check_array(node, items, path, label),
            Value::Object(map) => self.check_object(node, map, path, label),
            _ => {}
        }
        for &s in &node.all_of {
            self.check(s, value, path);
        }
        if !node.any_of.is_empty() && !node.any_of.iter().any(|&s| self.passes(s, value)) {
            // One alternative alone: its own messages say more.
            if let [only] = node.any_of[..] {
                self.check(only, value, path);
            } else {
                self.errors
                    .push(format!("{label} matches none of the allowed forms"));
            }
        }
        if !node.one_of.is_empty() {
            let matching = node.one_of.iter().filter(|&&s| self.passes(s, value)).count();
            match matching {
                1 => {}
                0 => {
                    if let [only] = node.one_of[..] {
                        self.check(only, value, path);
                    } else {
                        self.errors
                            .push(format!("{label} matches none of the allowed forms"));
                    }
                }
                _ => self
                    .errors
                    .push(format!("{label} matches more than one of the allowed forms")),
            }
        }
        if let Some(not) = node.not
            && self.passes(not, value)
        {
            self.errors
                .push(format!("{label} has a form that is not allowed"));
        }
        if let Some((condition, then, otherwise)) = node.condition {
            let branch = if self.passes(condition, value) {
                then
            } else {
                otherwise
            };
            if let Some(b) = branch {
                self.check(b, value, path);
            }
        }
    }

    fn check_number(&mut self, node: &Node, value: &Value, label: &str) {
        let Some(x) = number_of(value) else { return };
        for (bound, l) in &node.bounds {
            let (ok, op) = match bound {
                Bound::Minimum => (x >= l.value, ">="),
                Bound::Maximum => (x <= l.value, "<="),
                Bound::ExclusiveMinimum => (x > l.value, ">"),
                Bound::ExclusiveMaximum => (x < l.value, "<"),
            };
            if !ok {
                self.errors.push(format!("{label} must be {op} {}", l.shown));
            }
        }
        if let Some(m) = &node.multiple_of {
            let q = x / m.value;
            if !q.is_finite() || (q - q.round()).abs() > 1e-9 * q.abs().max(1.0) {
                self.errors
                    .push(format!("{label} must be a multiple of {}", m.shown));
            }
        }
    }

    fn check_string(&mut self, node: &Node, s: &str, label: &str) {
        let chars = || s.chars().count() as u64;
        if let Some(min) = node.min_length
            && chars() < min
        {
            self.errors.push(format!("{label} must be at least {min} chars"));
        }
        if let Some(max) = node.max_length
            && chars() > max
        {
            self.errors.push(format!("{label} must be at most {max} chars"));
        }
        if let Some((re, shown)) = &node.pattern
            && !re.is_match(s)
        {
            self.errors
                .push(format!("{label} must match the pattern {shown}"));
        }
    }

    fn check_array(&mut self, node: &Node, items: &[Value], path: &str, label: &str) {
        let n = items.len() as u64;
        if let Some(min) = node.min_items
            && n < min
        {
            self.errors
                .push(format!("{label} must have at least {min} items"));
        }
        if let Some(max) = node.max_items
            && n > max
        {
            self.errors.push(format!("{label} must have at most {max} items"));
        }
        if node.unique_items
            && items
                .iter()
                .enumerate()
                .any(|(i, a)| items[..i].iter().any(|b| equal(a, b)))
        {
            self.errors
                .push(format!("{label} must not contain the same item twice"));
        }
        for (i, item) in items.iter().enumerate() {
            let schema = node.prefix_items.get(i).copied().or(node.items);
            if let Some(s) = schema {
                self.check(s, item, &index_path(path, i));
            }
        }
        if let Some(c) = node.contains
            && !items.iter().any(|item| self.passes(c, item))
        {
            self.errors
                .push(format!("{label} must contain an item of the required form"));
        }
    }

    fn check_object(&mut self, node: &Node, map: &Map<String, Value>, path: &str, label: &str) {
        for name in &node.required {
            if !map.contains_key(name) {
                self.errors
                    .push(format!("missing required {}", child_path(path, name)));
            }
        }
        let n = map.len() as u64;
        if let Some(min) = node.min_properties
            && n < min
        {
            self.errors
                .push(format!("{label} must have at least {min} properties"));
        }
        if let Some(max) = node.max_properties
            && n > max
        {
            self.errors
                .push(format!("{label} must have at most {max} properties"));
        }
        for (key, v) in map {
            let mut known = false;
            if let Some((_, s)) = node.properties.iter().find(|(name, _)| name == key) {
                known = true;
                self.check(*s, v, &child_path(path, key));
            }
            for (re, s) in &node.pattern_properties {
                if re.is_match(key) {
                    known = true;
                    self.check(*s, v, &child_path(path, key));
                }
            }
            if known {
                continue;
            }
            match node.additional {
                Some(Additional::None) => self
                    .errors
                    .push(format!("unexpected parameter {}", child_path(path, key))),
                Some(Additional::Schema(s)) => self.check(s, v, &child_path(path, key)),
                None => {}
            }
        }
    }
}

impl Validator {
    /// Compiles `schema`; an error names the keyword of the wrong shape and where it is.
    pub(crate) fn new(schema: &Value) -> Result<Self, String> {
        let mut compiler = Compiler {
            root: schema,
            nodes: Vec::new(),
            refs: Vec::new(),
        };
        compiler.compile(schema, "")?;
        Ok(Self {
            nodes: compiler.nodes,
        })
    }

    /// What is wrong with `value` (empty: nothing), in the order the schema checks it.
    pub(crate) fn errors(&self, value: &Value) -> Vec<String> {
        let mut run = Run {
            nodes: &self.nodes,
            steps: 0,
            depth: 0,
            exhausted: false,
            errors: Vec::new(),
        };
        run.check(0, value, "");
        if run.exhausted {
            run.errors.push(
                "the tool's parameter schema refers to itself without end (or is too large to check)"
                    .to_owned(),
            );
        }
        run.errors
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn errors(schema: Value, value: Value) -> Vec<String> {
        Validator::new(&schema).unwrap().errors(&value)
    }

    #[test]
    fn types_and_scalars() {
        assert!(errors(json!({"type": "integer"}), json!(3)).is_empty());
        assert!(
            errors(json!({"type": "integer"}), json!(3.0)).is_empty(),
            "JSON Schema's integer"
        );
        assert_eq!(
            errors(json!({"type": "integer"}), json!(3.5)),
            ["parameter should be integer"]
        );
        assert_eq!(
            errors(json!({"type": ["string", "null"]}), json!(1)),
            ["parameter should be string or null"]
        );
        assert!(errors(json!({"type": ["string", "null"]}), json!(null)).is_empty());
        assert_eq!(
            errors(json!({"enum": ["a", "b"]}), json!("c")),
            [r#"parameter must be one of ["a","b"]"#]
        );
        assert!(errors(json!({"enum": [1, 2]}), json!(2.0)).is_empty());
        assert_eq!(
            errors(json!({"const": "x"}), json!("y")),
            [r#"parameter must be "x""#]
        );
        assert_eq!(
            errors(json!({"minimum": 1, "exclusiveMaximum": 10}), json!(10)),
            ["parameter must be < 10"]
        );
        assert_eq!(
            errors(json!({"minimum": 5, "exclusiveMinimum": true}), json!(5)),
            ["parameter must be > 5"],
            "draft 4's boolean form"
        );
        assert_eq!(
            errors(json!({"multipleOf": 0.5}), json!(1.25)),
            ["parameter must be a multiple of 0.5"]
        );
        assert!(errors(json!({"multipleOf": 0.1}), json!(0.3)).is_empty());
        assert_eq!(
            errors(json!({"minLength": 2, "maxLength": 3}), json!("é")),
            ["parameter must be at least 2 chars"],
            "lengths in characters"
        );
        assert_eq!(
            errors(json!({"pattern": "^[a-z]+$"}), json!("A1")),
            ["parameter must match the pattern ^[a-z]+$"]
        );
        assert!(
            errors(json!({"pattern": "^(?!x)"}), json!("x")).is_empty(),
            "a look-around is not checked"
        );
        assert_eq!(errors(json!(false), json!(1)), ["parameter is not allowed"]);
        assert!(errors(json!(true), json!(1)).is_empty());
    }

    #[test]
    fn objects_and_arrays_name_the_place() {
        let schema = json!({"type": "object", "additionalProperties": false, "required": ["a"],
            "properties": {"a": {"type": "object", "properties": {"b": {"type": "array",
                "items": {"type": "integer"}, "maxItems": 2, "uniqueItems": true}}}},
            "patternProperties": {"^x-": {"type": "string"}}});
        assert_eq!(errors(schema.clone(), json!({})), ["missing required a"]);
        assert_eq!(
            errors(
                schema.clone(),
                json!({"a": {"b": [1, "2", 1]}, "x-ok": 1, "zz": 0})
            ),
            [
                "a.b must have at most 2 items",
                "a.b must not contain the same item twice",
                "a.b[1] should be integer",
                "x-ok should be string",
                "unexpected parameter zz"
            ]
        );
        let tuple = json!({"prefixItems": [{"type": "string"}], "items": {"type": "integer"},
            "contains": {"const": 7}});
        assert_eq!(
            errors(tuple, json!(["s", "t"])),
            [
                "[1] should be integer",
                "parameter must contain an item of the required form"
            ]
        );
        assert_eq!(
            errors(
                json!({"additionalProperties": {"type": "boolean"}}),
                json!({"k": 1})
            ),
            ["k should be boolean"]
        );
    }

    #[test]
    fn combinators_conditions_and_references() {
        let schema = json!({"$defs": {"pos": {"type": "integer", "minimum": 1}},
            "properties": {"n": {"$ref": "#/$defs/pos"}, "m": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "o": {"oneOf": [{"type": "integer"}, {"type": "number"}]}, "p": {"not": {"type": "string"}},
                "q": {"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}}}});
        assert_eq!(errors(schema.clone(), json!({"n": 0})), ["n must be >= 1"]);
        assert_eq!(
            errors(schema.clone(), json!({"m": 1})),
            ["m matches none of the allowed forms"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"o": 1})),
            ["o matches more than one of the allowed forms"]
        );
        assert!(errors(schema.clone(), json!({"o": 1.5})).is_empty());
        assert_eq!(
            errors(schema.clone(), json!({"p": "s"})),
            ["p has a form that is not allowed"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"q": "a"})),
            ["q must be at least 2 chars"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"q": true})),
            ["q should be integer"]
        );
        // A recursive schema: a tree of any depth.
        let tree = json!({"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}},
            "name": {"type": "string"}}});
        assert_eq!(
            errors(tree, json!({"kids": [{"kids": [{"name": 3}]}]})),
            ["kids[0].kids[0].name should be string"]
        );
        // One that refers to itself without consuming the value ends.
        let endless = json!({"anyOf": [{"$ref": "#"}]});
        let out = errors(endless, json!(1));
        assert!(out.iter().any(|e| e.contains("refers to itself")), "{out:?}");
        // Another document's reference is not checked.
        assert!(errors(json!({"$ref": "https://example.org/s.json"}), json!(1)).is_empty());
    }

    #[test]
    fn a_schema_of_the_wrong_shape_is_refused_where_it_is() {
        for (schema, part) in [
            (json!({"type": 12}), "type 12"),
            (json!({"properties": {"n": {"type": "int"}}}), "/properties/n"),
            (json!({"required": "a"}), "required"),
            (json!({"minLength": -1}), "minLength"),
            (json!({"maximum": "9"}), "maximum"),
            (json!({"$ref": "#/$defs/missing"}), "points at nothing"),
            (json!({"items": 3}), "/items"),
            (json!(7), "not a schema"),
        ] {
            let err = Validator::new(&schema).unwrap_err();
            assert!(err.contains(part), "{schema}: {err}");
        }
    }
}
