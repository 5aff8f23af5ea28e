//! Starts `replay-server` as a child process and reads the address it bound.

use crate::cmd::{root, Result};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running server; killed on drop.
pub struct Server {
    child: Child,
    /// `http://IP:PORT`.
    pub url: String,
}

impl Server {
    /// Runs `binary` with `args`; waits for its `listening on` line.
    pub fn start(binary: &Path, args: &[&str]) -> Result<Server> {
        let mut child = Command::new(binary)
            .args(args)
            .current_dir(root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(url) = line.split("listening on ").nth(1) {
                        break url.trim().to_owned();
                    }
                }
                _ => {
                    let _ = child.kill();
                    return Err("replay-server exited before it listened".into());
                }
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Server { child, url })
    }

    /// Waits until the server exits (the demo runs until Ctrl-C).
    pub fn wait(mut self) -> Result {
        self.child.wait().map_err(|e| e.to_string())?;
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
