//! Byte counts as people write them: `4096`, `4K`, `64M`, `8G`, `2T`
//! (powers of 1024). The one parser and formatter of the workspace: the
//! workload format, traces and every command-line size go through it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A byte count; in TOML a number or a string like `"4K"`, `"1G"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Size(pub u64);

/// A size that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("size {text:?} is not a whole number of bytes with an optional K, M, G or T suffix (or is too large)")]
pub struct SizeError {
    /// What was given.
    pub text: String,
}

impl Size {
    /// Parse `123`, `4K`, `8m`, `1G`, `2T` (powers of 1024), surrounding
    /// white space ignored; `None` for anything else or a count past
    /// 2^64 − 1.
    pub fn parse(s: &str) -> Option<Size> {
        let s = s.trim();
        let mut chars = s.chars();
        let shift = match chars.next_back()?.to_ascii_uppercase() {
            'K' => 10,
            'M' => 20,
            'G' => 30,
            'T' => 40,
            _ => 0,
        };
        // The suffix is one ASCII letter, so what precedes it is a slice
        // on a character boundary whatever the input.
        let digits = if shift == 0 { s } else { chars.as_str() };
        let n: u64 = digits.trim().parse().ok()?;
        n.checked_mul(1 << shift).map(Size)
    }
}

impl FromStr for Size {
    type Err = SizeError;
    fn from_str(s: &str) -> Result<Size, SizeError> {
        Size::parse(s).ok_or_else(|| SizeError { text: s.to_string() })
    }
}

impl fmt::Display for Size {
    /// The largest unit that divides the count exactly (`3M`, `4097`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
            if self.0 != 0 && self.0.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            N(u64),
            S(String),
        }
        match Repr::deserialize(d)? {
            Repr::N(n) => Ok(Size(n)),
            Repr::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(Size::parse("4K"), Some(Size(4096)));
        assert_eq!(Size::parse("1g"), Some(Size(1 << 30)));
        assert_eq!(Size::parse("12"), Some(Size(12)));
        assert_eq!(Size::parse("K"), None);
        assert_eq!(Size::parse("99999999999T"), None);
        assert_eq!(Size(3 << 20).to_string(), "3M");
        assert_eq!(Size(4097).to_string(), "4097");
    }

    #[test]
    fn odd_characters_are_refused_or_trimmed_never_a_panic() {
        // A trailing no-break space is white space: trimmed.
        assert_eq!(Size::parse("8G\u{a0}"), Some(Size(8 << 30)));
        for bad in ["8Ğ", "é", "8\u{a0}G\u{2009}x", "Ｇ", "8GG", "-1K", "1.5G", ""] {
            assert_eq!(Size::parse(bad), None, "{bad:?}");
            assert!(bad.parse::<Size>().is_err());
        }
    }
}
