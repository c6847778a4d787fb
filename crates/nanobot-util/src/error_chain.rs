//! [`ErrorChain`]: an error and its sources on one line.

use std::error::Error;
use std::fmt;

/// Displays an error followed by its sources, `: `-separated (`could not connect: connection refused`). A
/// source whose text the line already contains is skipped, so errors that quote their source are not
/// repeated.
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = self.0.to_string();
        let mut source = self.0.source();
        while let Some(s) = source {
            let s_text = s.to_string();
            if !text.contains(&s_text) {
                text.push_str(": ");
                text.push_str(&s_text);
            }
            source = s.source();
        }
        f.write_str(&text)
    }
}

/// [`ErrorChain`] as a `String`.
pub fn error_chain(e: &(dyn Error + '_)) -> String {
    ErrorChain(e).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error, &'static str);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.1)
        }
    }
    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn joins_sources_and_skips_repeats() {
        let e = Outer(std::io::Error::other("connection refused"), "could not connect");
        assert_eq!(error_chain(&e), "could not connect: connection refused");
        let quoting = Outer(std::io::Error::other("refused"), "could not connect: refused");
        assert_eq!(error_chain(&quoting), "could not connect: refused");
    }
}
