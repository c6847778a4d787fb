//! Integration tests of the e-mail channel against real Dovecot and SMTP servers.
