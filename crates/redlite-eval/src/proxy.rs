//! A loopback relay between the agent and the server, one per agent run:
//! it counts the run's chat requests exactly (whoever else uses the server)
//! and, when asked, sets `temperature` in each chat request, which pi has no
//! setting for. Everything else passes through unchanged, responses
//! (streams included) byte for byte; one request per connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use crate::http::Chunked;

/// A running relay; stopped when dropped.
pub struct Proxy {
    port: u16,
    requests: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a free loopback port and relays to `upstream` (`host:port`).
    pub fn start(upstream: &str, temperature: Option<f64>) -> Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the relay")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s, up) = (requests.clone(), stop.clone(), upstream.to_string());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let (r, up) = (r.clone(), up.clone());
                        // A failed relay (most often: the agent was
                        // stopped mid-answer) ends that connection only; the
                        // agent sees it as a broken connection.
                        std::thread::spawn(move || {
                            let _ = relay(c, &up, temperature, &r);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(Proxy {
            port,
            requests,
            stop,
            thread: Some(thread),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Chat requests relayed so far.
    pub fn chat_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn relay(client: TcpStream, upstream: &str, temperature: Option<f64>, n: &AtomicU64) -> Result<()> {
    client.set_nonblocking(false)?;
    client.set_read_timeout(Some(Duration::from_secs(600)))?;
    let mut r = BufReader::new(client.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let request_line = line.trim_end().to_string();
    let mut parts = request_line.split_whitespace();
    let (method, path) = match (parts.next(), parts.next()) {
        (Some(m), Some(p)) => (m.to_string(), p.to_string()),
        _ => bail!("bad request line {request_line:?}"),
    };
    let mut headers = Vec::new();
    let (mut length, mut chunked) = (None, false);
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            break;
        }
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        let Some((k, v)) = h.split_once(':') else {
            continue;
        };
        let key = k.trim().to_ascii_lowercase();
        match key.as_str() {
            "content-length" => {
                length = Some(
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| anyhow!("bad Content-Length {v:?}"))?,
                )
            }
            "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
            "connection" | "keep-alive" | "host" => {}
            _ => headers.push(h.to_string()),
        }
    }
    let mut body = Vec::new();
    if chunked {
        Chunked {
            inner: &mut r,
            left: 0,
            done: false,
        }
        .read_to_end(&mut body)?;
    } else if let Some(len) = length {
        (&mut r).take(len).read_to_end(&mut body)?;
    }
    let chat = method == "POST" && path.trim_end_matches('/').ends_with("/chat/completions");
    if chat {
        n.fetch_add(1, Ordering::Relaxed);
        if let Some(t) = temperature {
            if let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(&body) {
                o.insert("temperature".into(), t.into());
                body = serde_json::to_vec(&Value::Object(o))?;
            }
        }
    }
    let mut up =
        TcpStream::connect(upstream).with_context(|| format!("connecting to {upstream}"))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {upstream}\r\nConnection: close\r\n");
    for h in &headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    if !body.is_empty() || length.is_some() || chunked {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    up.write_all(head.as_bytes())?;
    up.write_all(&body)?;
    // The answer, as it comes; the connection then closes.
    let mut c = client;
    let copied = std::io::copy(&mut up, &mut c);
    let _ = c.shutdown(Shutdown::Both);
    copied.context("relaying the answer")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that records one request and answers with a chunked body.
    fn upstream() -> (String, JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut head = String::new();
            let mut len = 0;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                head.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n6\r\ndata: \r\n3\r\nhi\n\r\n0\r\n\r\n")
                .unwrap();
            head + &String::from_utf8(body).unwrap()
        });
        (addr, t)
    }

    fn send(port: u16, req: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn sets_the_temperature_counts_and_relays_the_stream() {
        let (addr, t) = upstream();
        let p = Proxy::start(&addr, Some(0.25)).unwrap();
        let body = r#"{"model":"m","temperature":1.0,"stream":true}"#;
        let out = send(
            p.port(),
            &format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: keep-alive\r\nContent-Length: {}\r\n\r\n{body}", body.len()),
        );
        let seen = t.join().unwrap();
        // The answer comes back byte for byte.
        assert!(
            out.ends_with("6\r\ndata: \r\n3\r\nhi\n\r\n0\r\n\r\n"),
            "{out}"
        );
        assert!(
            seen.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
            "{seen}"
        );
        assert!(
            seen.contains("Content-Type: application/json\r\n"),
            "{seen}"
        );
        assert!(seen.contains("Connection: close\r\n") && !seen.contains("keep-alive"));
        assert!(seen.contains(&format!("Host: {addr}\r\n")), "{seen}");
        let b: Value = serde_json::from_str(seen.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(b["temperature"], 0.25);
        assert_eq!(b["model"], "m");
        assert_eq!(p.chat_requests(), 1);
    }

    #[test]
    fn other_requests_pass_unchanged_and_uncounted() {
        let (addr, t) = upstream();
        let p = Proxy::start(&addr, None).unwrap();
        let body = r#"{"content":"x","temperature":3}"#;
        send(
            p.port(),
            &format!("POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n", body.len()),
        );
        let seen = t.join().unwrap();
        assert!(seen.ends_with(body), "{seen}");
        assert!(seen.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert_eq!(p.chat_requests(), 0);
    }
}
