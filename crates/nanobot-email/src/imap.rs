//! IMAP connection: TCP, TLS or STARTTLS, greeting, login, select; every step bounded.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_imap::{Client, Session};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::{EmailError, EmailSettings};

/// An authenticated IMAP session over TLS.
pub(crate) type ImapSession = Session<TlsStream<TcpStream>>;

/// Runs `fut` within `limit`, naming the step on timeout.
pub(crate) async fn bounded<T>(
    endpoint: &str,
    what: &'static str,
    limit: Duration,
    fut: impl Future<Output = Result<T, async_imap::error::Error>>,
) -> Result<T, EmailError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(EmailError::Imap {
            endpoint: endpoint.to_string(),
            what,
            source,
        }),
        Err(_) => Err(EmailError::Timeout {
            endpoint: endpoint.to_string(),
            what,
            limit,
        }),
    }
}

async fn timed<T>(
    endpoint: &str,
    what: &'static str,
    limit: Duration,
    fut: impl Future<Output = std::io::Result<T>>,
) -> Result<T, EmailError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(EmailError::Connect {
            endpoint: endpoint.to_string(),
            source,
        }),
        Err(_) => Err(EmailError::Timeout {
            endpoint: endpoint.to_string(),
            what,
            limit,
        }),
    }
}

/// Connects, secures the connection (TLS or STARTTLS) and logs in.
pub(crate) async fn connect(
    settings: &EmailSettings,
    tls: Arc<ClientConfig>,
) -> Result<ImapSession, EmailError> {
    let imap = &settings.imap;
    let endpoint = imap.endpoint();
    let limit = settings.timeout;
    let server_name = ServerName::try_from(imap.host.clone())
        .map_err(|e| EmailError::Config(format!("channels.email.imapHost {:?}: {e}", imap.host)))?;
    let tcp = timed(
        &endpoint,
        "connect",
        limit,
        TcpStream::connect((imap.host.as_str(), imap.port)),
    )
    .await?;
    let _ = tcp.set_nodelay(true);
    let connector = TlsConnector::from(tls);
    let stream = if imap.implicit_tls {
        let stream = timed(
            &endpoint,
            "the TLS handshake",
            limit,
            connector.connect(server_name, tcp),
        )
        .await?;
        let mut client = Client::new(stream);
        greeting(&mut client, &endpoint, limit).await?;
        client
    } else {
        let mut plain = Client::new(tcp);
        greeting(&mut plain, &endpoint, limit).await?;
        // A server that does not offer STARTTLS answers BAD or NO: then no password is sent.
        match tokio::time::timeout(limit, plain.run_command_and_check_ok("STARTTLS", None)).await {
            Ok(Ok(())) => {}
            Ok(Err(async_imap::error::Error::Bad(m) | async_imap::error::Error::No(m))) => {
                return Err(EmailError::Protocol {
                    endpoint,
                    message: format!(
                        "STARTTLS refused ({m}) and imapUseSsl is false; not logging in without TLS"
                    ),
                });
            }
            Ok(Err(source)) => {
                return Err(EmailError::Imap {
                    endpoint,
                    what: "STARTTLS",
                    source,
                });
            }
            Err(_) => {
                return Err(EmailError::Timeout {
                    endpoint,
                    what: "STARTTLS",
                    limit,
                });
            }
        }
        let tcp = plain.into_inner();
        let stream = timed(
            &endpoint,
            "the TLS handshake",
            limit,
            connector.connect(server_name, tcp),
        )
        .await?;
        Client::new(stream)
    };
    match tokio::time::timeout(limit, stream.login(&imap.username, imap.password.expose())).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err((async_imap::error::Error::No(message) | async_imap::error::Error::Bad(message), _))) => {
            Err(EmailError::Login {
                endpoint,
                username: imap.username.clone(),
                // A server that quotes the LOGIN command it got would quote the password.
                message: nanobot_channels::server_text(&message, &[imap.password.expose()]),
            })
        }
        Ok(Err((source, _))) => Err(EmailError::Imap {
            endpoint,
            what: "LOGIN",
            source,
        }),
        Err(_) => Err(EmailError::Timeout {
            endpoint,
            what: "LOGIN",
            limit,
        }),
    }
}

async fn greeting<T>(client: &mut Client<T>, endpoint: &str, limit: Duration) -> Result<(), EmailError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + std::fmt::Debug + Send,
{
    let greeting = timed(endpoint, "the greeting", limit, client.read_response()).await?;
    match greeting {
        None => Err(EmailError::Protocol {
            endpoint: endpoint.to_string(),
            message: "the server closed the connection before greeting".into(),
        }),
        Some(resp) => {
            if let async_imap::imap_proto::Response::Data {
                status: async_imap::imap_proto::Status::Bye,
                ..
            } = resp.parsed()
            {
                return Err(EmailError::Protocol {
                    endpoint: endpoint.to_string(),
                    message: "the server greeted with BYE".into(),
                });
            }
            Ok(())
        }
    }
}

/// Selects the configured mailbox; returns its UIDVALIDITY.
pub(crate) async fn select(session: &mut ImapSession, settings: &EmailSettings) -> Result<u32, EmailError> {
    let endpoint = settings.imap.endpoint();
    let mailbox = match tokio::time::timeout(settings.timeout, session.select(&settings.imap.mailbox)).await {
        Ok(Ok(m)) => m,
        Ok(Err(async_imap::error::Error::No(message))) => {
            return Err(EmailError::Protocol {
                endpoint,
                message: format!(
                    "channels.email.imapMailbox {:?} cannot be selected: {message}",
                    settings.imap.mailbox
                ),
            });
        }
        Ok(Err(source)) => {
            return Err(EmailError::Imap {
                endpoint,
                what: "SELECT",
                source,
            });
        }
        Err(_) => {
            return Err(EmailError::Timeout {
                endpoint,
                what: "SELECT",
                limit: settings.timeout,
            });
        }
    };
    Ok(mailbox.uid_validity.unwrap_or(0))
}

/// Logs out politely, bounded; errors do not matter any more.
pub(crate) async fn logout(mut session: ImapSession, limit: Duration) {
    let _ = tokio::time::timeout(limit.min(Duration::from_secs(5)), session.logout()).await;
}
