//! A loopback HTTP/1.1 server for tests, std only: bound to `127.0.0.1:0`, one thread
//! per connection, one request per connection (`Connection: close`), a handler closure
//! that sees the request and returns the response.
//!
//! The tests' stand-ins for ternd, a release server, GitHub's API or a webhook are
//! handlers; [`files`] answers from a directory. A handler may misbehave on purpose: a
//! `Content-Length` header it sets is sent as it is (a lie about the body's length, a
//! value that is not a number), in place of the body's real length.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long the server waits for a client's request, or for it to take the answer,
/// before giving up on it.
const PATIENCE: Duration = Duration::from_secs(10);

/// The largest request body read: a test's client sends kilobytes; a bigger
/// `Content-Length` is answered 413 rather than allocated.
const MAX_BODY: usize = 64 << 20;

/// A request as a handler sees it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub method: String,
    /// The request target as sent: path and query.
    pub target: String,
    /// Names as sent; look them up with [`Request::header`].
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The target's path (before any `?`).
    pub fn path(&self) -> &str {
        self.target.split_once('?').map_or(&self.target, |(p, _)| p)
    }

    /// The target's query (after the `?`; empty without one).
    pub fn query(&self) -> &str {
        self.target.split_once('?').map_or("", |(_, q)| q)
    }

    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A handler's answer. `Content-Length` is the body's unless the handler sets one;
/// the body is not sent for `HEAD`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// A 404 with an empty body.
    pub fn not_found() -> Self {
        Response::new(404, Vec::new())
    }

    /// The same response with one more header.
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

/// The file `dir/<path>` (a leading `/` ignored) with a 200, or a 404 when it is not
/// there, or when the path is empty or has a `..` (which could climb out of `dir`).
pub fn file(dir: &Path, path: &str) -> Response {
    let name = path.trim_start_matches('/');
    if name.is_empty() || name.contains("..") {
        return Response::not_found();
    }
    match std::fs::read(dir.join(name)) {
        Ok(data) => Response::new(200, data),
        Err(_) => Response::not_found(),
    }
}

/// A handler serving `dir`'s files for `GET` and `HEAD` (405 for other methods).
pub fn files(dir: &Path) -> impl Fn(&Request) -> Response + Send + Sync + 'static {
    let dir = dir.to_path_buf();
    move |req: &Request| match req.method.as_str() {
        "GET" | "HEAD" => file(&dir, req.path()),
        _ => Response::new(405, Vec::new()),
    }
}

/// A running server. It serves until the test process ends, as the hand-rolled ones it
/// replaces did: tests hold it to read its URL and how many requests it answered.
pub struct HttpServer {
    addr: SocketAddr,
    url: String,
    requests: Arc<AtomicUsize>,
    panics: Arc<AtomicUsize>,
}

impl HttpServer {
    /// Starts serving `handler` on a free loopback port.
    ///
    /// # Panics
    /// When no loopback port can be bound (a test that cannot run here).
    pub fn start(handler: impl Fn(&Request) -> Response + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("cannot bind a loopback port for a test server: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("a bound listener has no address: {e}"));
        let counts = Counts::default();
        let (requests, panics) = (Arc::clone(&counts.requests), Arc::clone(&counts.panics));
        let handler = Arc::new(handler);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (handler, counts) = (Arc::clone(&handler), counts.clone());
                std::thread::spawn(move || {
                    // A client that goes away mid-exchange is the client's business.
                    let _ = exchange(conn, &*handler, &counts);
                });
            }
        });
        HttpServer {
            addr,
            url: format!("http://{addr}"),
            requests,
            panics,
        }
    }

    /// Serves `dir`'s files (see [`files`]).
    pub fn serve_dir(dir: &Path) -> Self {
        HttpServer::start(files(dir))
    }

    /// `http://127.0.0.1:<port>`, no trailing slash.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many requests were read whole and handed to the handler so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// How many times the handler panicked. Each was answered 500 with the panic's
    /// message, so the test's client sees the cause, not a closed connection.
    pub fn panics(&self) -> usize {
        self.panics.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Default)]
struct Counts {
    requests: Arc<AtomicUsize>,
    panics: Arc<AtomicUsize>,
}

fn exchange(
    conn: TcpStream,
    handler: &(dyn Fn(&Request) -> Response + Send + Sync),
    counts: &Counts,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(PATIENCE))?;
    conn.set_write_timeout(Some(PATIENCE))?;
    let req = match read_request(&mut BufReader::new(conn.try_clone()?)) {
        Ok(req) => req,
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            let resp = Response::new(413, format!("{e}\n"));
            return write_response(conn, &resp, false);
        }
        Err(e) => return Err(e),
    };
    counts.requests.fetch_add(1, Ordering::SeqCst);
    let resp = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&req)))
        .unwrap_or_else(|panic| {
            counts.panics.fetch_add(1, Ordering::SeqCst);
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(not a string)".to_string());
            Response::new(
                500,
                format!(
                    "the test server's handler panicked on {} {}: {why}\n",
                    req.method, req.target
                ),
            )
        });
    write_response(conn, &resp, req.method == "HEAD")
}

fn read_request(r: &mut impl BufRead) -> std::io::Result<Request> {
    let mut first = String::new();
    if r.read_line(&mut first)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut req = Request {
        method,
        target,
        headers,
        body: Vec::new(),
    };
    let len: usize = req
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if len > MAX_BODY {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!(
                "a request body of {len} bytes is more than the test server reads ({MAX_BODY})"
            ),
        ));
    }
    req.body = vec![0; len];
    r.read_exact(&mut req.body)?;
    Ok(req)
}

fn write_response(mut w: TcpStream, resp: &Response, head: bool) -> std::io::Result<()> {
    let mut text = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    let has_length = resp
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
    if !has_length {
        text.push_str(&format!("Content-Length: {}\r\n", resp.body.len()));
    }
    text.push_str("Connection: close\r\n");
    for (k, v) in &resp.headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    w.write_all(text.as_bytes())?;
    if !head {
        w.write_all(&resp.body)?;
    }
    w.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

/// A plain `GET` of `path` from `addr` (one request, `Connection: close`, at most
/// `patience` to connect and for each read): the status and the body, everything after
/// the head (no chunked encoding). To probe a server, as the etcd cluster probes its
/// members' health.
pub fn get(addr: SocketAddr, path: &str, patience: Duration) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, patience)?;
    s.set_read_timeout(Some(patience))?;
    s.set_write_timeout(Some(patience))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(bad)?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    Ok((status, raw[end + 4..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch(server: &HttpServer, path: &str) -> (u16, Vec<u8>) {
        get(server.addr(), path, Duration::from_secs(10)).unwrap()
    }

    /// The raw answer to a raw request.
    fn raw(server: &HttpServer, request: &str) -> String {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn a_handler_sees_the_request_and_answers() {
        let server = HttpServer::start(|req: &Request| {
            let text = format!(
                "{} {} {} q={} x={:?} body={}",
                req.method,
                req.target,
                req.path(),
                req.query(),
                req.header("X-Thing"),
                String::from_utf8_lossy(&req.body)
            );
            Response::new(201, text).header("X-Answer", "yes")
        });
        let out = raw(
            &server,
            "POST /a/b?c=d HTTP/1.1\r\nx-thing: 7\r\nContent-Length: 5\r\n\r\nhello",
        );
        assert!(out.starts_with("HTTP/1.1 201 "), "{out}");
        assert!(out.contains("\r\nX-Answer: yes\r\n"), "{out}");
        let body = "POST /a/b?c=d /a/b q=c=d x=Some(\"7\") body=hello";
        assert!(
            out.contains(&format!("Content-Length: {}\r\n", body.len())),
            "{out}"
        );
        assert!(out.ends_with(&format!("\r\n\r\n{body}")), "{out}");
        assert_eq!(server.requests(), 1);
        assert_eq!(fetch(&server, "/").0, 201);
        assert_eq!(server.requests(), 2);
    }

    #[test]
    fn a_directory_is_served_and_what_is_not_there_is_404() {
        let dir = std::env::temp_dir().join(format!("tern-testing-http-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a.txt"), "the file").unwrap();
        std::fs::write(dir.join("secret"), "outside").unwrap();
        let server = HttpServer::serve_dir(&dir.join("sub"));
        assert_eq!(fetch(&server, "/a.txt"), (200, b"the file".to_vec()));
        assert_eq!(fetch(&server, "/missing").0, 404);
        assert_eq!(fetch(&server, "/").0, 404);
        assert_eq!(fetch(&server, "/../secret").0, 404);
        // HEAD: the length of the file, no body.
        let out = raw(&server, "HEAD /a.txt HTTP/1.1\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("Content-Length: 8\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\n"), "{out}");
        let out = raw(&server, "PUT /a.txt HTTP/1.1\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 405 "), "{out}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_handler_may_lie_about_the_length() {
        let server = HttpServer::start(|_: &Request| {
            Response::new(200, "abc").header("Content-Length", "not-a-number")
        });
        let out = raw(&server, "GET / HTTP/1.1\r\n\r\n");
        assert!(
            out.contains("\r\nContent-Length: not-a-number\r\n"),
            "{out}"
        );
        assert_eq!(out.matches("Content-Length").count(), 1, "{out}");
        assert!(out.ends_with("\r\n\r\nabc"), "{out}");
    }

    #[test]
    fn a_panicking_handler_answers_500_with_its_message_and_the_server_goes_on() {
        let server = HttpServer::start(|req: &Request| {
            if req.path() == "/boom" {
                panic!("no such fixture");
            }
            Response::new(200, "fine")
        });
        let (status, body) = fetch(&server, "/boom");
        assert_eq!(status, 500);
        let body = String::from_utf8(body).unwrap();
        assert!(
            body.contains("GET /boom") && body.contains("no such fixture"),
            "{body}"
        );
        assert_eq!(fetch(&server, "/ok"), (200, b"fine".to_vec()));
        assert_eq!((server.requests(), server.panics()), (2, 1));
    }

    #[test]
    fn a_body_too_large_is_refused_not_allocated() {
        let server = HttpServer::start(|_: &Request| Response::new(200, "read"));
        let out = raw(
            &server,
            "POST / HTTP/1.1\r\nContent-Length: 99999999999999\r\n\r\n",
        );
        assert!(out.starts_with("HTTP/1.1 413 "), "{out}");
        assert!(out.contains("99999999999999 bytes"), "{out}");
        assert_eq!(server.requests(), 0);
    }
}
