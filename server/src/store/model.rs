//! The store's one model of what an appended event does to the
//! projections: the typed states of turns, tool calls, questions and
//! processes (their columns hold [`as_str`](TurnState::as_str)), and
//! [`project`], which maps an event to [`Op`]s. Pure, so it is tested
//! here without a database; each backend runs the ops in its own SQL
//! dialect (SQLite in `sqlite::apply`, Postgres in `pg::append`, which
//! also fences them: only the node holding a turn or process writes it).

use replay_core::protocol::{Event, Scope};

use super::{StoreError, StoreResult};

/// Declares a state enum whose column holds its lowercase name.
macro_rules! states {
    ($(#[$doc:meta])* $name:ident, $kind:literal { $($(#[$vdoc:meta])* $v:ident = $s:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name {
            $($(#[$vdoc])* $v,)+
        }

        impl $name {
            /// The column's value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$v => $s,)+
                }
            }

            /// A column's value back; an unknown one is an error (a store
            /// written by a newer server, or damaged), never a guess.
            pub fn parse(s: &str) -> StoreResult<$name> {
                match s {
                    $($s => Ok($name::$v),)+
                    _ => Err(StoreError::UnknownState {
                        kind: $kind,
                        value: s.to_owned(),
                    }),
                }
            }
        }
    };
}

states! {
    /// Where a turn is.
    TurnState, "turn" {
        /// Accepted, not started.
        Queued = "queued",
        /// Started.
        Running = "running",
        /// Claimed by a node to end it, its own node being gone (Postgres).
        Failing = "failing",
        /// Ended normally.
        Completed = "completed",
        /// Ended by an error or a restart.
        Failed = "failed",
        /// Ended by the client.
        Cancelled = "cancelled",
    }
}

states! {
    /// Where a tool call is.
    ToolState, "tool" {
        /// Started.
        Running = "running",
        /// Completed (whatever its outcome).
        Completed = "completed",
    }
}

states! {
    /// Where a persisted question is.
    QuestionState, "question" {
        /// Asked, unanswered.
        Pending = "pending",
        /// Answered.
        Answered = "answered",
        /// Declined (by the client, or at recovery).
        Declined = "declined",
    }
}

states! {
    /// Where a runtime-managed process is.
    ProcessState, "process" {
        /// Running.
        Running = "running",
        /// Exited with a code.
        Exited = "exited",
        /// Failed (or lost at a restart).
        Failed = "failed",
    }
}

/// One change to the projections. Ids borrow from the event and its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'e> {
    /// An event of a turn, in its session's log; `to` moves the turn. On
    /// Postgres only the node holding the open turn may write it (with or
    /// without a move).
    Turn {
        /// The turn.
        turn_id: &'e str,
        /// Its new state, if the event moves it.
        to: Option<TurnState>,
    },
    /// A tool call started (kept if already known).
    ToolStarted {
        /// The session whose log the event is in.
        session_id: &'e str,
        /// The turn.
        turn_id: &'e str,
        /// The call.
        call_id: &'e str,
    },
    /// A tool call completed.
    ToolCompleted {
        /// The call.
        call_id: &'e str,
    },
    /// A question asked (kept if already known).
    QuestionAsked {
        /// The session whose log the event is in.
        session_id: &'e str,
        /// The turn.
        turn_id: &'e str,
        /// The question.
        question_id: &'e str,
    },
    /// A question answered or declined.
    QuestionClosed {
        /// The question.
        question_id: &'e str,
        /// Its new state.
        to: QuestionState,
    },
    /// A process started (kept if already known).
    ProcessStarted {
        /// The process (its log's id).
        process_id: &'e str,
        /// Its command line.
        command: &'e str,
    },
    /// A process ended.
    ProcessEnded {
        /// The process (its log's id).
        process_id: &'e str,
        /// How.
        to: ProcessState,
        /// Its exit code, when it exited (a failure keeps what was stored).
        exit_code: Option<i64>,
    },
}

/// The turn an event of a session's log belongs to, and where it moves it.
fn turn_of(event: &Event) -> Option<(&str, Option<TurnState>)> {
    Some(match event {
        Event::TurnStarted(t) => (&t.turn_id, Some(TurnState::Running)),
        Event::TurnCompleted(t) => (&t.turn_id, Some(TurnState::Completed)),
        Event::TurnCancelled(t) => (&t.turn_id, Some(TurnState::Cancelled)),
        Event::TurnFailed(t) => (&t.turn_id, Some(TurnState::Failed)),
        Event::MessageCommitted(m) => (&m.turn_id, None),
        Event::ToolStarted(t) => (&t.turn_id, None),
        Event::ToolCompleted(t) => (&t.turn_id, None),
        Event::QuestionAsked(q) => (&q.turn_id, None),
        _ => return None,
    })
}

/// What appending `event` to the log `(scope, scope_id)` changes, in the
/// order to apply it (a turn's fence before the rest). Turn events count in
/// a session's log only, process events in a process's log only.
pub fn project<'e>(scope: Scope, scope_id: &'e str, event: &'e Event) -> Vec<Op<'e>> {
    let mut ops = Vec::with_capacity(2);
    if scope == Scope::Session {
        if let Some((turn_id, to)) = turn_of(event) {
            ops.push(Op::Turn { turn_id, to });
        }
    }
    let process = scope == Scope::Process;
    ops.extend(match event {
        Event::ToolStarted(t) => Some(Op::ToolStarted {
            session_id: scope_id,
            turn_id: &t.turn_id,
            call_id: &t.call_id,
        }),
        Event::ToolCompleted(t) => Some(Op::ToolCompleted {
            call_id: &t.call_id,
        }),
        Event::QuestionAsked(q) => Some(Op::QuestionAsked {
            session_id: scope_id,
            turn_id: &q.turn_id,
            question_id: &q.question_id,
        }),
        Event::QuestionAnswered(q) => Some(Op::QuestionClosed {
            question_id: &q.question_id,
            to: QuestionState::Answered,
        }),
        Event::QuestionDeclined(q) => Some(Op::QuestionClosed {
            question_id: &q.question_id,
            to: QuestionState::Declined,
        }),
        Event::ProcessStarted(p) if process => Some(Op::ProcessStarted {
            process_id: scope_id,
            command: &p.command,
        }),
        Event::ProcessExited(p) if process => Some(Op::ProcessEnded {
            process_id: scope_id,
            to: ProcessState::Exited,
            exit_code: Some(p.code),
        }),
        Event::ProcessFailed(_) if process => Some(Op::ProcessEnded {
            process_id: scope_id,
            to: ProcessState::Failed,
            exit_code: None,
        }),
        _ => None,
    });
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_core::protocol::{
        ProcessExited, ProcessStarted, QuestionAsked, QuestionDeclined, ToolStarted, TurnRef,
        TurnStarted, WithReason,
    };

    fn turn(id: &str) -> TurnRef {
        TurnRef { turn_id: id.into() }
    }

    #[test]
    fn turn_events_move_their_turn_in_a_session_log_only() {
        let started = Event::TurnStarted(TurnStarted {
            turn_id: "t".into(),
            input_message_id: "m".into(),
        });
        assert_eq!(
            project(Scope::Session, "s", &started),
            [Op::Turn {
                turn_id: "t",
                to: Some(TurnState::Running)
            }]
        );
        let cancelled = Event::TurnCancelled(turn("t"));
        assert_eq!(
            project(Scope::Session, "s", &cancelled),
            [Op::Turn {
                turn_id: "t",
                to: Some(TurnState::Cancelled)
            }]
        );
        assert_eq!(project(Scope::Team, "s", &cancelled), []);
    }

    #[test]
    fn a_tool_start_is_fenced_by_its_turn_then_recorded() {
        let event = Event::ToolStarted(ToolStarted {
            turn_id: "t".into(),
            call_id: "c".into(),
            name: "shell".into(),
            input: Default::default(),
        });
        assert_eq!(
            project(Scope::Session, "s", &event),
            [
                Op::Turn {
                    turn_id: "t",
                    to: None
                },
                Op::ToolStarted {
                    session_id: "s",
                    turn_id: "t",
                    call_id: "c"
                }
            ]
        );
    }

    #[test]
    fn questions_open_and_close() {
        let asked = Event::QuestionAsked(QuestionAsked {
            turn_id: "t".into(),
            question_id: "q".into(),
            ..Default::default()
        });
        assert_eq!(
            project(Scope::Session, "s", &asked)[1],
            Op::QuestionAsked {
                session_id: "s",
                turn_id: "t",
                question_id: "q"
            }
        );
        let declined = Event::QuestionDeclined(QuestionDeclined {
            question_id: "q".into(),
            ..Default::default()
        });
        assert_eq!(
            project(Scope::Session, "s", &declined),
            [Op::QuestionClosed {
                question_id: "q",
                to: QuestionState::Declined
            }]
        );
    }

    #[test]
    fn process_events_count_in_a_process_log_only() {
        let started = Event::ProcessStarted(ProcessStarted {
            process_id: "p".into(),
            command: "make".into(),
        });
        assert_eq!(
            project(Scope::Process, "p", &started),
            [Op::ProcessStarted {
                process_id: "p",
                command: "make"
            }]
        );
        assert_eq!(project(Scope::Session, "p", &started), []);
        let exited = Event::ProcessExited(ProcessExited { code: 3 });
        assert_eq!(
            project(Scope::Process, "p", &exited),
            [Op::ProcessEnded {
                process_id: "p",
                to: ProcessState::Exited,
                exit_code: Some(3)
            }]
        );
        let failed = Event::ProcessFailed(WithReason::default());
        assert_eq!(
            project(Scope::Process, "p", &failed),
            [Op::ProcessEnded {
                process_id: "p",
                to: ProcessState::Failed,
                exit_code: None
            }]
        );
    }

    #[test]
    fn other_events_change_nothing() {
        let closed = Event::SessionClosed(Default::default());
        assert_eq!(project(Scope::Session, "s", &closed), []);
    }

    #[test]
    fn states_round_trip_through_their_columns() {
        for s in [
            TurnState::Queued,
            TurnState::Running,
            TurnState::Failing,
            TurnState::Completed,
            TurnState::Failed,
            TurnState::Cancelled,
        ] {
            assert_eq!(TurnState::parse(s.as_str()).unwrap(), s);
        }
        for s in [
            ProcessState::Running,
            ProcessState::Exited,
            ProcessState::Failed,
        ] {
            assert_eq!(ProcessState::parse(s.as_str()).unwrap(), s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in [
            QuestionState::Pending,
            QuestionState::Answered,
            QuestionState::Declined,
        ] {
            assert_eq!(QuestionState::parse(s.as_str()).unwrap(), s);
        }
        assert_eq!(
            ToolState::parse(ToolState::Completed.as_str()).unwrap(),
            ToolState::Completed
        );
        assert!(TurnState::parse("paused").is_err());
    }
}
