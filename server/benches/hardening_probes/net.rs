//! Raw loopback sockets for the hardening shapes: a connection from a
//! chosen loopback address (Linux routes all of 127.0.0.0/8 to `lo`, so
//! 127.0.0.2, .3, … are distinct peers to the server), a request, its
//! status, and a victim's timed request.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// How long a victim waits before its request counts as unanswered.
pub const VICTIM_WAIT: Duration = Duration::from_secs(5);

/// A connection to `to` from the loopback address `from`, within 2 s (a
/// full accept queue drops SYNs, and the kernel retries for minutes).
pub async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(from.parse::<IpAddr>().expect("an IP"), 0))?;
    tokio::time::timeout(Duration::from_secs(2), sock.connect(to))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// A `GET` request head; `sse` asks for an event stream.
pub fn get(to: SocketAddr, path: &str, sse: bool) -> Vec<u8> {
    let accept = if sse {
        "Accept: text/event-stream\r\n"
    } else {
        ""
    };
    format!("GET {path} HTTP/1.1\r\nHost: {to}\r\n{accept}\r\n").into_bytes()
}

/// What a request got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A status line with this code.
    Status(u16),
    /// The connection closed before a status line.
    Closed,
    /// Nothing within the wait.
    Silent,
}

/// Reads a response head (up to its blank line) within `within`, then
/// waits until `needle` has come too when one is given (an SSE stream's
/// `event: hello`).
pub async fn read_answer(sock: &mut TcpStream, needle: Option<&str>, within: Duration) -> Answer {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            let status = {
                let text = String::from_utf8_lossy(&got);
                let status = status_of(&text);
                let end = text.find("\r\n\r\n");
                let done = end.is_some_and(|end| {
                    status != Some(200) || needle.is_none_or(|n| text[end..].contains(n))
                });
                if done {
                    return status.map_or(Answer::Closed, Answer::Status);
                }
                status
            };
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return status.map_or(Answer::Closed, Answer::Status),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .unwrap_or(Answer::Silent)
}

fn status_of(text: &str) -> Option<u16> {
    let line = text.lines().next()?;
    line.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// A fresh connection from `from` sends `GET path` and waits for its
/// answer (with `needle`, see [`read_answer`]); the answer, how long it
/// took, and the connection (a stream stays open while it is held).
pub async fn request(
    from: &str,
    to: SocketAddr,
    path: &str,
    needle: Option<&str>,
    within: Duration,
) -> (Answer, Duration, Option<TcpStream>) {
    let start = Instant::now();
    let Ok(Ok(mut sock)) = tokio::time::timeout(within, connect_from(from, to)).await else {
        return (Answer::Silent, start.elapsed(), None);
    };
    if sock
        .write_all(&get(to, path, needle.is_some()))
        .await
        .is_err()
    {
        return (Answer::Closed, start.elapsed(), None);
    }
    let left = within.saturating_sub(start.elapsed());
    let answer = read_answer(&mut sock, needle, left).await;
    (answer, start.elapsed(), Some(sock))
}

/// Victim requests from `from`, `tries` of them `every` apart, each on a
/// fresh connection closed after its answer; their times in ms (an
/// unanswered one counts [`VICTIM_WAIT`]) and how many were answered
/// `200`.
pub async fn victims(
    from: &str,
    to: SocketAddr,
    path: &str,
    needle: Option<&str>,
    tries: usize,
    every: Duration,
) -> (Vec<f64>, usize) {
    let mut times = Vec::with_capacity(tries);
    let mut ok = 0;
    for i in 0..tries {
        if i > 0 {
            tokio::time::sleep(every).await;
        }
        let (answer, took, _) = request(from, to, path, needle, VICTIM_WAIT).await;
        eprintln!("  victim {from} {path}: {answer:?} after {took:?}");
        ok += usize::from(answer == Answer::Status(200));
        times.push(took.as_secs_f64() * 1000.0);
    }
    (times, ok)
}

/// Counts of what a set of attacker requests got.
#[derive(Default, Debug)]
pub struct Tally {
    /// Answered `200` (streams: opened and held).
    pub ok: usize,
    /// Answered `503`.
    pub refused: usize,
    /// Any other status, a close before an answer, or silence.
    pub other: usize,
}

impl Tally {
    /// Counts one answer.
    pub fn add(&mut self, answer: Answer) {
        match answer {
            Answer::Status(200) => self.ok += 1,
            Answer::Status(503) => self.refused += 1,
            _ => self.other += 1,
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Tally) {
        self.ok += other.ok;
        self.refused += other.refused;
        self.other += other.other;
    }
}

/// Opens `n` connections from `from`, each sending `GET path` (a stream
/// when `sse`), all at once; the tally of their answers (each waited for
/// up to 3 s) and the connections answered `200`, held open.
pub async fn flood(
    from: &str,
    to: SocketAddr,
    path: &str,
    sse: bool,
    n: usize,
) -> (Tally, Vec<TcpStream>) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (from, path) = (from.to_owned(), path.to_owned());
            tokio::spawn(async move {
                let needle = sse.then_some("\r\n\r\n");
                let wait = Duration::from_secs(3);
                let (answer, _, sock) = request(&from, to, &path, needle, wait).await;
                (answer, sock)
            })
        })
        .collect();
    let mut tally = Tally::default();
    let mut held = Vec::new();
    for task in tasks {
        let (answer, sock) = task.await.expect("flood task");
        tally.add(answer);
        if answer == Answer::Status(200) {
            held.extend(sock);
        }
    }
    (tally, held)
}

/// p50 and max of a set of times.
pub fn p50_max(times: &[f64]) -> (f64, f64) {
    let mut sorted = times.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let p50 = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    (p50, sorted.last().copied().unwrap_or(f64::NAN))
}
