//! Looking for secrets where they must not be: everything logged at TRACE level (our code and every library,
//! `log` records included) and every rendering of an error and its sources.

use std::sync::{Arc, Mutex};

/// Everything a tracing subscriber writes. Install it with [`LogCapture::install`] in a test binary of its own,
/// so that it is the process-wide subscriber.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// A capture installed as the global subscriber at TRACE level, without colours.
    ///
    /// # Panics
    /// When a global subscriber is already installed (a test binary gets one).
    #[allow(
        clippy::expect_used,
        reason = "test helper: a second install is a broken test binary"
    )]
    pub fn install() -> Self {
        let capture = Self::default();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(capture.clone())
            .with_ansi(false)
            .try_init()
            .expect("LogCapture::install: a global subscriber is already set");
        capture
    }

    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
            .into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;

    fn make_writer(&'a self) -> LogCapture {
        self.clone()
    }
}

/// `e` and each of its sources, with `Display` and `Debug`, one per line.
pub fn error_text(e: &dyn std::error::Error) -> String {
    let mut out = format!("{e}\n{e:?}\n");
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(&format!("{s}\n{s:?}\n"));
        src = s.source();
    }
    out
}
