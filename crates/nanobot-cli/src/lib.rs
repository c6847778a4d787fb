//! The nanobot command line (work in progress).
