//! A round-robin TCP proxy for `cargo xtask demo --cluster N`: each
//! connection accepted on one address goes to the next node, so a browser's
//! reconnects land on different processes, as behind a load balancer.

use crate::cmd::Result;
use std::io::copy;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;

/// Serves `listen`, forwarding each connection to the next of `backends`
/// (`IP:PORT`), until the process ends.
pub fn round_robin(listen: &str, backends: &[String]) -> Result {
    let listener = TcpListener::bind(listen).map_err(|e| format!("bind {listen}: {e}"))?;
    for (n, client) in listener.incoming().enumerate() {
        let Ok(client) = client else { continue };
        let backend = backends[n % backends.len()].clone();
        thread::spawn(move || {
            if let Ok(server) = TcpStream::connect(&backend) {
                pipe(client, server);
            }
        });
    }
    Ok(())
}

/// Copies both ways until either side closes.
fn pipe(client: TcpStream, server: TcpStream) {
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = thread::spawn(move || {
        let _ = copy(&mut &client2, &mut &server2);
        let _ = server2.shutdown(Shutdown::Write);
    });
    let _ = copy(&mut &server, &mut &client);
    let _ = client.shutdown(Shutdown::Write);
    let _ = up.join();
}

#[cfg(test)]
mod tests {
    use super::round_robin;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// A backend that answers each connection with its name.
    fn backend(name: &'static str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let mut byte = [0u8; 1];
                let _ = conn.read_exact(&mut byte);
                let _ = conn.write_all(name.as_bytes());
            }
        });
        addr
    }

    #[test]
    fn each_connection_goes_to_the_next_backend() {
        let backends = vec![backend("a"), backend("b")];
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let listen = front.local_addr().unwrap().to_string();
        drop(front);
        let served = listen.clone();
        std::thread::spawn(move || round_robin(&served, &backends));
        let ask = || {
            let mut conn = loop {
                if let Ok(c) = TcpStream::connect(&listen) {
                    break c;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            };
            conn.write_all(b"?").unwrap();
            let mut answer = [0u8; 1];
            conn.read_exact(&mut answer).unwrap();
            answer[0] as char
        };
        let got: String = (0..4).map(|_| ask()).collect();
        assert_eq!(got, "abab");
    }
}
