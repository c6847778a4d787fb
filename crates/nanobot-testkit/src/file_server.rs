//! [`FileServer`]: a plain HTTP/1.1 server on `127.0.0.1` answering fixed paths with files, redirects or a body
//! whose `Content-Length` lies, counting the requests per path. For the tests of whatever fetches remote files
//! (channels sending media, bounded downloads).

use nanobot_util::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A canned answer: status, headers, body, and what the `Content-Length` header says.
#[derive(Debug, Clone)]
pub struct Answer {
    status: &'static str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    length: Option<Option<usize>>,
}

impl Answer {
    /// `200 OK` with `body` as `image/png`.
    pub fn ok(body: &[u8]) -> Self {
        Self::file(body, "image/png; charset=binary")
    }

    /// `200 OK` with `body` of `content_type`.
    pub fn file(body: &[u8], content_type: &str) -> Self {
        Self {
            status: "200 OK",
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.to_vec(),
            length: None,
        }
    }

    /// The same answer without a `Content-Length` header: the body ends when the connection does, so a reader
    /// learns its size only by reading it.
    #[must_use]
    pub fn without_length(mut self) -> Self {
        self.length = Some(None);
        self
    }
    /// `302 Found` to `to`.
    pub fn redirect(to: &str) -> Self {
        Self {
            status: "302 Found",
            headers: vec![("Location".into(), to.into())],
            body: Vec::new(),
            length: None,
        }
    }
}

/// An HTTP/1.1 server on 127.0.0.1 answering paths from a table (404 otherwise) and counting requests per path.
#[derive(Debug)]
pub struct FileServer {
    base: String,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl FileServer {
    /// A server on `127.0.0.1` answering `routes` (404 otherwise).
    pub async fn start(routes: Vec<(&str, Answer)>) -> Self {
        Self::start_on("127.0.0.1:0", routes).await
    }

    /// The same on `addr` (another loopback address, say).
    ///
    /// # Panics
    /// When `addr` cannot be bound.
    pub async fn start_on(addr: &str, routes: Vec<(&str, Answer)>) -> Self {
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
        let base = match listener.local_addr() {
            Ok(a) => format!("http://{a}"),
            Err(e) => panic!("no local address: {e}"),
        };
        let routes: HashMap<String, Answer> = routes.into_iter().map(|(p, a)| (p.to_string(), a)).collect();
        let hits = Arc::new(Mutex::new(HashMap::new()));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let routes = routes.clone();
                let hits = counted.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                        if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head);
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    *lock(&hits).entry(path.clone()).or_default() += 1;
                    let answer = routes.get(&path).cloned().unwrap_or(Answer {
                        status: "404 Not Found",
                        headers: Vec::new(),
                        body: Vec::new(),
                        length: None,
                    });
                    let mut out = format!("HTTP/1.1 {}\r\nConnection: close\r\n", answer.status);
                    for (k, v) in &answer.headers {
                        out.push_str(&format!("{k}: {v}\r\n"));
                    }
                    match answer.length {
                        None => out.push_str(&format!("Content-Length: {}\r\n", answer.body.len())),
                        Some(Some(n)) => out.push_str(&format!("Content-Length: {n}\r\n")),
                        Some(None) => {}
                    }
                    out.push_str("\r\n");
                    let _ = socket.write_all(out.as_bytes()).await;
                    let _ = socket.write_all(&answer.body).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Self { base, hits }
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// How many requests asked for `path`.
    pub fn hits(&self, path: &str) -> usize {
        lock(&self.hits).get(path).copied().unwrap_or(0)
    }
}
