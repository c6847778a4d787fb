//! [`ApprovalPolicy`]: when the user is asked before a tool call runs (`tools.approval.mode`). One type for the
//! config, which reads it, and the agent core, which applies it (neither may depend on the other).

use std::fmt;

use serde::{Deserialize, Serialize};

/// When the user is asked before a tool call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ApprovalPolicy {
    /// `"off"` (also `""` and `"never"`): never ask (the Python nanobot's behaviour).
    #[default]
    Off,
    /// `"risky"`: ask before calls that delete, reach the network, install, change permissions or run code the
    /// guard cannot read, and before file writes outside the workspace.
    Risky,
    /// `"always"`: ask before every command, every call that runs code and every such file write.
    Always,
}

impl ApprovalPolicy {
    /// Reads a setting's value (any case, surrounding blanks ignored); `None` for an unknown value.
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "never" => Some(Self::Off),
            "risky" => Some(Self::Risky),
            "always" => Some(Self::Always),
            _ => None,
        }
    }

    /// The value as written in `config.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Risky => "risky",
            Self::Always => "always",
        }
    }
}

impl fmt::Display for ApprovalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ApprovalPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ApprovalPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let text = Option::<String>::deserialize(de)?.unwrap_or_default();
        Self::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "expected \"off\", \"risky\" or \"always\", found {text:?}"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_in_any_case_written_lowercase_and_an_unknown_value_named() {
        for (text, want) in [
            ("\"\"", ApprovalPolicy::Off),
            ("null", ApprovalPolicy::Off),
            ("\"never\"", ApprovalPolicy::Off),
            ("\" Risky \"", ApprovalPolicy::Risky),
            ("\"ALWAYS\"", ApprovalPolicy::Always),
        ] {
            assert_eq!(
                serde_json::from_str::<ApprovalPolicy>(text).unwrap(),
                want,
                "{text}"
            );
        }
        assert_eq!(
            serde_json::to_string(&ApprovalPolicy::Risky).unwrap(),
            "\"risky\""
        );
        let err = serde_json::from_str::<ApprovalPolicy>("\"sometimes\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"sometimes\"") && err.contains("risky"), "{err}");
    }
}
