//! The other scopes' payloads (PROTOCOL.md §1, §3): process, team,
//! worktree and system events, which a client keeps as text.

use super::*;

wire_struct! {
    /// `process.started`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ProcessStarted {
        /// The process.
        process_id: String,
        /// Its command line.
        command: String = default,
    }
}

wire_struct! {
    /// `process.exited`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ProcessExited {
        /// Exit code.
        code: i64,
    }
}

wire_enum! {
    /// Which output stream of a process.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum OutputStream {
        /// Standard output.
        Stdout = "stdout",
        /// Standard error.
        Stderr = "stderr",
    }
}

wire_struct! {
    /// `process.output` (droppable sample; the process log is authoritative).
    #[derive(Clone, Debug, PartialEq)]
    pub struct ProcessOutput {
        /// Which stream.
        stream: OutputStream,
        /// Byte offset in the process log.
        offset: u64,
        /// The sample.
        text: String,
    }
}

wire_struct! {
    /// `team.message`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TeamMessage {
        /// Sender.
        from: String,
        /// Recipient.
        to: String,
        /// Text.
        text: String,
    }
}

wire_struct! {
    /// `delivery.deferred`, `delivery.delivered`, `delivery.failed`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Delivery {
        /// The delivery.
        delivery_id: String,
        /// Recipient.
        to: String = default,
        /// Why, for deferred and failed deliveries.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String> = default,
    }
}

wire_struct! {
    /// `worktree.*`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Worktree {
        /// The worktree.
        worktree_id: String,
        /// The session that claims it, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        session_id: Option<String> = default,
    }
}

wire_struct! {
    /// `system.started`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SystemStarted {
        /// The new run.
        boot_id: String,
    }
}

wire_struct! {
    /// `system.recovered`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SystemRecovered {
        /// What startup recovery did.
        summary: RawJson = default,
    }
}
