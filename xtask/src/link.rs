//! A network link of the bench's own, between a browser and a server on one
//! machine (this kernel has no `tc netem`): a TCP proxy that delays every
//! byte by half the round trip each way and paces each direction to the
//! link's bandwidth, shared by every connection through it, as one access
//! link is.
//!
//! What it models: propagation (half the round trip each way), the
//! bandwidth (a byte leaves once the bytes before it have, at the link's
//! rate) and a new connection's handshake (its first bytes go one round
//! trip after the connect, when a SYN and SYN-ACK would have crossed). What
//! it does not: loss, TCP's slow start and windows (the loopback connection
//! behind it has its own), so a figure through it is a floor of what a real
//! path of the same round trip and rate costs.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

/// A link's shape.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The round trip: each direction is delayed by half of it.
    pub rtt: Duration,
    /// Each direction's bandwidth, bits per second.
    pub bits_per_s: u64,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "link {} ms / {} Mbit/s",
            self.rtt.as_millis(),
            self.bits_per_s / 1_000_000
        )
    }
}

impl Shape {
    /// The time `bytes` take on the wire at this bandwidth.
    fn wire_time(&self, bytes: usize) -> Duration {
        Duration::from_secs_f64(bytes as f64 * 8.0 / self.bits_per_s as f64)
    }
}

/// The links the bench measures through, by the name its figures carry: a
/// distant or mobile user's path, and a good broadband one.
pub const SHAPES: &[(&str, Shape)] = &[
    (
        "100ms",
        Shape {
            rtt: Duration::from_millis(100),
            bits_per_s: 10_000_000,
        },
    ),
    (
        "30ms",
        Shape {
            rtt: Duration::from_millis(30),
            bits_per_s: 50_000_000,
        },
    ),
];

/// The bytes a segment carries at most: one Ethernet frame's TCP payload,
/// so a large read is paced out as a real link sends it, not in one lump.
const SEGMENT: usize = 1460;

/// A running link on its own thread and runtime; stops when the process
/// ends (the bench's lifetime).
pub struct Link {
    /// `http://127.0.0.1:PORT`: the backend's origin seen through the link.
    pub url: String,
}

impl Link {
    /// Listens on a free loopback port and forwards each connection to
    /// `backend` (`IP:PORT`) through a link of `shape`.
    pub fn start(backend: &str, shape: Shape) -> crate::cmd::Result<Link> {
        let std_listener =
            std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("link: bind: {e}"))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| format!("link: {e}"))?;
        let addr = std_listener.local_addr().map_err(|e| e.to_string())?;
        let backend: SocketAddr = backend
            .parse()
            .map_err(|e| format!("link: backend {backend}: {e}"))?;
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("a tokio listener");
                serve(listener, backend, shape).await;
            });
        });
        Ok(Link {
            url: format!("http://{addr}"),
        })
    }
}

/// One direction of the link: when its wire is free again. Every
/// connection's bytes in that direction queue for the same wire.
#[derive(Clone)]
struct Wire {
    free_at: Arc<Mutex<Instant>>,
    shape: Shape,
}

impl Wire {
    fn new(shape: Shape) -> Wire {
        Wire {
            free_at: Arc::new(Mutex::new(Instant::now())),
            shape,
        }
    }

    /// When a segment of `bytes` that reached the link at `now` arrives at
    /// the far end: after the segments before it, its own wire time and
    /// half the round trip.
    fn arrival(&self, now: Instant, bytes: usize) -> Instant {
        let mut free_at = self.free_at.lock().expect("the wire's lock");
        let sent = (*free_at).max(now) + self.shape.wire_time(bytes);
        *free_at = sent;
        sent + self.shape.rtt / 2
    }
}

async fn serve(listener: TcpListener, backend: SocketAddr, shape: Shape) {
    let up = Wire::new(shape);
    let down = Wire::new(shape);
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let (up, down) = (up.clone(), down.clone());
        tokio::spawn(async move {
            // The handshake's round trip: the client's first bytes could
            // not have left before the SYN-ACK came back.
            let opened = Instant::now() + shape.rtt;
            let Ok(server) = TcpStream::connect(backend).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::join!(
                carry(client_read, server_write, up, opened),
                carry(server_read, client_write, down, opened),
            );
        });
    }
}

/// Carries one direction of a connection: each segment read is written at
/// the instant the link delivers it; the end of the stream follows the
/// last segment.
async fn carry(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, wire: Wire, opened: Instant) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let now = Instant::now().max(opened);
            for segment in buf[..n].chunks(SEGMENT) {
                let at = wire.arrival(now, segment.len());
                if tx.send((at, segment.to_vec())).is_err() {
                    return;
                }
            }
        }
    };
    let writer = async move {
        while let Some((at, segment)) = rx.recv().await {
            sleep_until(at).await;
            if to.write_all(&segment).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::Link;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    /// A backend that answers each byte `b` it reads with `b` KiB of `b`
    /// (`0`: a one-byte echo), so one connection measures both the round
    /// trip and the rate.
    fn backend() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut byte = [0u8; 1];
                    while conn.read_exact(&mut byte).is_ok() {
                        let answer = match byte[0] {
                            0 => vec![0u8],
                            n => vec![n; usize::from(n) * 1024],
                        };
                        if conn.write_all(&answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn ask(conn: &mut TcpStream, byte: u8) -> Duration {
        let start = Instant::now();
        conn.write_all(&[byte]).unwrap();
        let mut answer = vec![
            0u8;
            if byte == 0 {
                1
            } else {
                usize::from(byte) * 1024
            }
        ];
        conn.read_exact(&mut answer).unwrap();
        start.elapsed()
    }

    fn within(measured: f64, asked: f64, what: &str) {
        let off = (measured - asked).abs() / asked;
        assert!(
            off <= 0.10,
            "{what}: measured {measured:.4}, asked {asked:.4} ({:.1} % off)",
            off * 100.0
        );
    }

    /// The link's round trip and rate within 10 % of its shape, for both
    /// shapes the bench uses.
    #[test]
    fn delay_and_rate_are_what_was_asked() {
        let backend = backend();
        for &(_, shape) in super::SHAPES {
            let link = Link::start(&backend, shape).unwrap();
            let connect = || {
                let conn = TcpStream::connect(link.url.trim_start_matches("http://")).unwrap();
                conn.set_nodelay(true).unwrap();
                conn
            };
            // The fastest of several: a loaded machine only ever adds time
            // (a late wake-up), so the least time is the link's own, and a
            // link that delays or paces too little still fails.
            let least = |xs: Vec<f64>| xs.into_iter().fold(f64::INFINITY, f64::min);
            // A new connection's first exchange also pays the handshake's
            // round trip.
            let firsts = (0..5)
                .map(|_| ask(&mut connect(), 0).as_secs_f64())
                .collect();
            within(
                least(firsts),
                2.0 * shape.rtt.as_secs_f64(),
                "handshake and round trip",
            );
            let mut conn = connect();
            ask(&mut conn, 0);
            let rtt = least((0..9).map(|_| ask(&mut conn, 0).as_secs_f64()).collect());
            within(rtt, shape.rtt.as_secs_f64(), "round trip");
            // 250 KiB down: the round trip, then the bytes at the rate.
            let bulk = least((0..3).map(|_| ask(&mut conn, 250).as_secs_f64()).collect()) - rtt;
            let rate = (250.0 * 1024.0 * 8.0) / bulk;
            within(rate, shape.bits_per_s as f64, "rate (bits/s)");
        }
    }
}
