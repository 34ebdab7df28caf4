//! The lab's errors: [`LabError`] says which part failed and keeps the
//! cause as its source, so a chain prints each cause once
//! ([`chain`]: "building a volume: /dev/shm/x: No space left on device").
//!
//! [`LabError::Unavailable`] is not a failure of the run: it is a backend
//! this machine cannot offer (no root, no loop device, a missing tool),
//! which a report lists as skipped.

use crate::runner::RunError;
use crate::units::SizeError;
use crate::workload::WorkloadError;
use std::error::Error as StdError;

/// What went wrong in the lab.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// A backend this machine cannot offer, and why (the row is skipped).
    #[error("{0}")]
    Unavailable(String),
    /// A file or device call failed.
    #[error("{what}")]
    Io {
        /// What was being done, naming the path.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// An external tool (mkfs, mount, cp) failed.
    #[error("{program} failed: {message}")]
    Tool {
        /// The program.
        program: String,
        /// The first line it printed on its error output.
        message: String,
    },
    /// A workload or trace that cannot run.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// A size that does not parse.
    #[error(transparent)]
    Size(#[from] SizeError),
    /// An operation of a run failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The file layer refused.
    #[error(transparent)]
    Engine(#[from] mballoc_fs::FsError),
    /// The allocator refused.
    #[error(transparent)]
    Allocator(#[from] mballoc::Error),
    /// The persistent volume failed.
    #[error(transparent)]
    Volume(#[from] mballoc_vol::VolError),
    /// An ext4 image could not be read.
    #[error(transparent)]
    Image(#[from] mballoc_ext4::Ext4Error),
    /// A request the lab cannot carry out as asked.
    #[error("{0}")]
    Invalid(String),
    /// What the lab was doing when `source` happened.
    #[error("{context}")]
    Context {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: Box<LabError>,
    },
}

impl LabError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> LabError {
        LabError::Io { what: what.into(), source }
    }

    /// This error, said to have happened while doing `context`. An
    /// unavailable backend stays unavailable whatever the context.
    pub fn context(self, context: impl Into<String>) -> LabError {
        match self {
            LabError::Unavailable(why) => LabError::Unavailable(why),
            e => LabError::Context { context: context.into(), source: Box::new(e) },
        }
    }

    /// Whether this says a backend cannot run here rather than that a run
    /// failed.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, LabError::Unavailable(_))
    }
}

/// Adds context to a fallible result.
pub trait Context<T> {
    /// On error, say what was being done.
    fn context(self, what: impl Into<String>) -> Result<T, LabError>;
}

impl<T, E: Into<LabError>> Context<T> for Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T, LabError> {
        self.map_err(|e| e.into().context(what))
    }
}

/// An error and its causes as one line, each message once: a cause whose
/// text its parent already shows is not repeated.
pub fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let msg = s.to_string();
        if !msg.is_empty() && !out.contains(&msg) {
            out.push_str(": ");
            out.push_str(&msg);
        }
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_names_each_cause_once() {
        let io = std::io::Error::from_raw_os_error(21);
        let e = LabError::io("/tmp/x", io).context("writing the report");
        let text = chain(&e);
        assert_eq!(text.matches("os error 21").count(), 1, "{text}");
        assert!(text.starts_with("writing the report: /tmp/x: "), "{text}");
        // A source that repeats its parent's message is shown once.
        let v = mballoc_vol::VolError::ReadOnly;
        assert_eq!(chain(&LabError::from(v)), "volume is read-only");
        assert!(LabError::Unavailable("no root".into()).context("x").is_unavailable());
    }
}
