//! Integration tests of the e-mail channel against real servers: Dovecot (IMAP, IDLE) and aiosmtpd (SMTP)
//! delivering into Dovecot's Maildirs. See `peers.rs`.

mod channel;
mod peers;
