//! A small blocking HTTP/1.1 client over `std::net`, enough to talk to
//! `redlite serve` as any user's client would: `GET`, `POST` with a JSON body,
//! and server-sent events read line by line as they arrive. One connection
//! per request (`Connection: close`); plain `http://` only (the server binds
//! loopback; TLS belongs in a proxy in front of it).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

/// Where the server is, and how long a read may stall.
#[derive(Clone, Debug)]
pub struct Http {
    /// `host:port`.
    authority: String,
    /// Path prefix from the URL (without a trailing `/`), usually empty.
    prefix: String,
    /// Longest wait for any single read or write.
    pub io_timeout: Duration,
    /// `Authorization: Bearer` value, if the server needs one.
    pub api_key: Option<String>,
}

/// A response whose body is read on demand.
pub struct Response {
    pub status: u16,
    body: Box<dyn BufRead + Send>,
}

impl Response {
    /// The whole body as text.
    pub fn text(mut self) -> Result<String> {
        let mut s = String::new();
        self.body
            .read_to_string(&mut s)
            .context("reading the response body")?;
        Ok(s)
    }

    /// The body's reader (for streaming).
    pub fn reader(&mut self) -> &mut (dyn BufRead + Send) {
        &mut *self.body
    }
}

impl Http {
    /// `url`: `http://host:port` (a path after it is kept as a prefix).
    pub fn new(url: &str) -> Result<Http> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            anyhow!("--url {url}: only http:// URLs are supported (e.g. http://127.0.0.1:8080)")
        })?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() {
            bail!("--url {url}: no host");
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !authority.ends_with(']')
        {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Http {
            authority,
            prefix: prefix.to_string(),
            io_timeout: Duration::from_secs(600),
            api_key: None,
        })
    }

    /// `host:port`.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// Send one request; the response's headers are read, its body is not.
    pub fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Response> {
        let url = format!("http://{}{}{}", self.authority, self.prefix, path);
        let addr = self
            .authority
            .to_socket_addrs()
            .with_context(|| format!("resolving {}", self.authority))?
            .next()
            .ok_or_else(|| anyhow!("{} resolves to no address", self.authority))?;
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .with_context(|| format!("connecting to {url}"))?;
        stream.set_read_timeout(Some(self.io_timeout))?;
        stream.set_write_timeout(Some(self.io_timeout))?;
        let mut head = format!(
            "{method} {}{path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: redlite-eval\r\nAccept: */*\r\nConnection: close\r\n",
            self.prefix, self.authority
        );
        if let Some(k) = &self.api_key {
            head.push_str(&format!("Authorization: Bearer {k}\r\n"));
        }
        if let Some(b) = body {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        head.push_str("\r\n");
        let mut w = &stream;
        w.write_all(head.as_bytes())
            .and_then(|_| w.write_all(body.unwrap_or(&[])))
            .with_context(|| format!("sending {method} {url}"))?;
        let mut r = BufReader::new(stream);
        let mut line = String::new();
        r.read_line(&mut line)
            .with_context(|| format!("reading the status line of {method} {url}"))?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| anyhow!("{method} {url}: bad status line {:?}", line.trim_end()))?;
        let mut chunked = false;
        let mut length = None;
        loop {
            line.clear();
            let n = r
                .read_line(&mut line)
                .with_context(|| format!("reading the headers of {method} {url}"))?;
            let h = line.trim_end();
            if n == 0 || h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                    chunked = true;
                } else if k == "content-length" {
                    length = Some(
                        v.parse::<u64>()
                            .map_err(|_| anyhow!("{method} {url}: bad Content-Length {v:?}"))?,
                    );
                }
            }
        }
        let body: Box<dyn BufRead + Send> = if chunked {
            Box::new(BufReader::new(Chunked {
                inner: r,
                left: 0,
                done: false,
            }))
        } else if let Some(n) = length {
            Box::new(r.take(n))
        } else {
            Box::new(r)
        };
        Ok(Response { status, body })
    }

    /// Wait until the server has loaded its model: `/health` answers 503
    /// while a server is loading (it binds its port first). Any other
    /// answer but 200, or no answer, is an error; so is still loading
    /// after `max`.
    pub fn wait_ready(&self, max: std::time::Duration) -> Result<()> {
        let start = std::time::Instant::now();
        let mut said = false;
        loop {
            let r = self.request("GET", "/health", None)?;
            let status = r.status;
            let text = r.text()?;
            match status {
                200 => return Ok(()),
                503 if start.elapsed() < max => {
                    if !said {
                        eprintln!("waiting for the server to load its model ...");
                        said = true;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(250));
                }
                503 => bail!(
                    "the server was still loading after {} s: {}",
                    max.as_secs(),
                    text.trim()
                ),
                _ => bail!("GET /health: HTTP {status}: {}", text.trim()),
            }
        }
    }

    /// `GET path` → body text; any status but 200 is an error naming it.
    pub fn get_text(&self, path: &str) -> Result<String> {
        let r = self.request("GET", path, None)?;
        let status = r.status;
        let text = r.text()?;
        if status != 200 {
            bail!("GET {path}: HTTP {status}: {}", text.trim());
        }
        Ok(text)
    }

    /// `POST path` with a JSON body → the JSON answer (200 only).
    pub fn post_json(&self, path: &str, body: &Value) -> Result<Value> {
        let r = self.request("POST", path, Some(body.to_string().as_bytes()))?;
        let status = r.status;
        let text = r.text()?;
        if status != 200 {
            bail!("POST {path}: HTTP {status}: {}", text.trim());
        }
        serde_json::from_str(&text).with_context(|| format!("POST {path}: the answer is not JSON"))
    }
}

/// Decodes `Transfer-Encoding: chunked`.
pub(crate) struct Chunked<R> {
    pub(crate) inner: R,
    pub(crate) left: usize,
    pub(crate) done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            self.inner.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or("").trim();
            if size.is_empty() {
                return Err(bad("chunked body ends without its last chunk".into()));
            }
            self.left = usize::from_str_radix(size, 16)
                .map_err(|_| bad(format!("bad chunk size {size:?}")))?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(bad("connection closed inside a chunk".into()));
        }
        self.left -= n;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

/// The value of one Prometheus sample line (`name{labels} value`), summed
/// over every line whose name and labels contain all of `parts`.
pub fn metric_sum(text: &str, name: &str, label_parts: &[&str]) -> Option<f64> {
    let mut found = None;
    for l in text.lines() {
        if l.starts_with('#') {
            continue;
        }
        let Some((key, v)) = l.rsplit_once(' ') else {
            continue;
        };
        let base = key.split('{').next().unwrap_or(key);
        if base != name || !label_parts.iter().all(|p| key.contains(p)) {
            continue;
        }
        if let Ok(x) = v.trim().parse::<f64>() {
            *found.get_or_insert(0.0) += x;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_decode() {
        let raw = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
        let mut c = Chunked {
            inner: &raw[..],
            left: 0,
            done: false,
        };
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello, world");
        let cut = b"5\r\nhel";
        let mut c = Chunked {
            inner: &cut[..],
            left: 0,
            done: false,
        };
        assert!(c.read_to_string(&mut String::new()).is_err());
    }

    #[test]
    fn urls_and_metrics() {
        let h = Http::new("http://127.0.0.1:8080/").unwrap();
        assert_eq!(h.authority(), "127.0.0.1:8080");
        assert_eq!(h.prefix, "");
        assert_eq!(
            Http::new("http://localhost").unwrap().authority(),
            "localhost:80"
        );
        assert!(Http::new("https://x:1").is_err());
        let m = "# HELP x\nredlite_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 3\nredlite_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1\nredlite_requests_total{endpoint=\"/tokenize\",status=\"200\"} 9\nredlite_x 2.5\n";
        assert_eq!(
            metric_sum(m, "redlite_requests_total", &["\"/v1/chat/completions\""]),
            Some(4.0)
        );
        assert_eq!(metric_sum(m, "redlite_x", &[]), Some(2.5));
        assert_eq!(metric_sum(m, "redlite_y", &[]), None);
    }
}
