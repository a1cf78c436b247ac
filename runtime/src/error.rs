//! Printing an error with its sources, once each.
//!
//! Meridian's error variants print only their own part and keep the cause as
//! `#[source]`; whatever shows an error to a person (a log line, a status message, an
//! Event) prints the chain with [`Report`], so "creating Deployment shop/web in sim-1:
//! connection refused" reads whole and no part of it twice.

use std::error::Error;
use std::fmt;

/// Displays an error and its sources, joined by `": "`. A source whose text an earlier
/// part already contains is skipped (some foreign errors print their cause themselves).
pub struct Report<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut printed = self.0.to_string();
        f.write_str(&printed)?;
        let mut cur = self.0.source();
        while let Some(e) = cur {
            let s = e.to_string();
            if !s.is_empty() && !printed.contains(&s) {
                write!(f, ": {s}")?;
                printed.push_str(&s);
            }
            cur = e.source();
        }
        Ok(())
    }
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The error and its sources as one line (see [`Report`]).
pub fn report(e: &(dyn Error + 'static)) -> String {
    Report(e).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("creating x in m1")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Middle(#[source] std::io::Error);

    /// A foreign error that prints its cause itself.
    #[derive(Debug, thiserror::Error)]
    #[error("wrapped: {0}")]
    struct Loud(#[source] std::io::Error);

    #[test]
    fn prints_each_source_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Outer(Middle(io()));
        assert_eq!(
            report(&e),
            "creating x in m1: client error (Connect): refused"
        );
        assert_eq!(report(&Loud(io())), "wrapped: refused");
    }
}
