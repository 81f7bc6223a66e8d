//! Byte sizes as people write them, for the whole workspace: one parser
//! (layout parameters, mount options, command-line sizes) and the two ways
//! of printing a size, exactly (`64K`, as layout specs print) or rounded for
//! reading (`1.5 GiB`).
//!
//! ```
//! use hurricane::units::{format_exact, human, parse_size};
//! assert_eq!(parse_size("64K"), Ok(65536));
//! assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
//! assert_eq!(format_exact(65536), "64K");
//! assert_eq!(human(3 << 29), "1.5 GiB");
//! ```

use std::fmt;

/// Binary multiples, by suffix letter.
const SUFFIXES: [(char, u32); 5] = [('K', 10), ('M', 20), ('G', 30), ('T', 40), ('P', 50)];

/// Why text is not a size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeError {
    /// Not a number with an optional suffix.
    NotASize,
    /// A size, but more than 2^64 - 1 bytes.
    TooLarge,
    /// A fraction that is not a whole number of bytes (`0.3K`).
    Fraction,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SizeError::NotASize => "not a size (examples: 4096, 64K, 512M, 1.5G, 2TiB)",
            SizeError::TooLarge => "too large (at most 2^64 - 1 bytes)",
            SizeError::Fraction => "not a whole number of bytes",
        })
    }
}

impl std::error::Error for SizeError {}

/// A byte count: digits, optionally with a decimal fraction, then an
/// optional binary suffix `K`, `M`, `G`, `T` or `P` (any case, multiples
/// of 1024) optionally followed by `B` or `iB`; a bare trailing `B` means
/// bytes. Leading and trailing white space is ignored. A fraction must come
/// to a whole number of bytes (`1.5K` is 1536, `0.3K` is refused).
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let body = strip_suffix_ci(t, "ib").or_else(|| strip_suffix_ci(t, "b")).unwrap_or(t);
    let (num, shift) = match body.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some(c) => match SUFFIXES.iter().find(|(l, _)| *l == c) {
            Some(&(_, sh)) => (&body[..body.len() - 1], sh),
            // "iB" needs a multiple before it; "B" alone is bytes.
            None if body.len() != t.len() && t.len() - body.len() == 2 => return Err(SizeError::NotASize),
            None => (body, 0),
        },
        None => return Err(SizeError::NotASize),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || (num.contains('.') && frac.is_empty()) {
        return Err(SizeError::NotASize);
    }
    let whole = int.parse::<u64>().map_err(|_| SizeError::TooLarge)?;
    let mut n = whole.checked_mul(1u64 << shift).ok_or(SizeError::TooLarge)?;
    let frac = frac.trim_end_matches('0');
    if !frac.is_empty() {
        // frac / 10^k of a multiple: exact only if 10^k divides frac * 2^shift.
        if frac.len() > 19 {
            return Err(SizeError::Fraction);
        }
        let f: u128 = frac.parse().map_err(|_| SizeError::NotASize)?;
        let scaled = f << shift;
        let den = 10u128.pow(frac.len() as u32);
        if !scaled.is_multiple_of(den) {
            return Err(SizeError::Fraction);
        }
        let add = u64::try_from(scaled / den).map_err(|_| SizeError::TooLarge)?;
        n = n.checked_add(add).ok_or(SizeError::TooLarge)?;
    }
    Ok(n)
}

fn strip_suffix_ci<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(suffix.len())?;
    (s.is_char_boundary(cut) && s[cut..].eq_ignore_ascii_case(suffix)).then(|| &s[..cut])
}

/// The exact, shortest spelling `parse_size` reads back: the largest
/// suffix up to `T` that divides the size (`64K`, `3M`, `4097`).
pub fn format_exact(n: u64) -> String {
    for (suffix, shift) in SUFFIXES[..4].iter().rev() {
        if n != 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{}", n >> shift, suffix);
        }
    }
    n.to_string()
}

/// A size rounded for reading: `512 B`, `1.5 KiB`, `200 MiB` (one decimal
/// below 100 of a unit, none above).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_plain_suffixed_and_fractional_sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 64K "), Ok(65536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("64KB"), Ok(65536));
        assert_eq!(parse_size("64kib"), Ok(65536));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1.50g"), Ok(3 << 29));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("2P"), Ok(2 << 50));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("16383P"), Ok(16383 << 50));
    }

    #[test]
    fn refuses_what_is_not_a_size() {
        for s in ["", " ", "G", "K", "KiB", "B", "iB", "12X", "-1M", "1.M", ".5M", "1..5M", "1 M", "5iB", "0x10", "1e3"]
        {
            assert_eq!(parse_size(s), Err(SizeError::NotASize), "{s:?}");
        }
        assert_eq!(parse_size("0.3K"), Err(SizeError::Fraction));
        assert_eq!(parse_size("1.5"), Err(SizeError::Fraction));
        assert_eq!(parse_size("99999999999999T"), Err(SizeError::TooLarge));
        assert_eq!(parse_size("16384P"), Err(SizeError::TooLarge));
        assert_eq!(parse_size("18446744073709551616"), Err(SizeError::TooLarge));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_size("16383.9999999999999999999K"), Err(SizeError::Fraction));
    }

    #[test]
    fn formats() {
        assert_eq!(format_exact(0), "0");
        assert_eq!(format_exact(4097), "4097");
        assert_eq!(format_exact(64 << 10), "64K");
        assert_eq!(format_exact(3 << 20), "3M");
        assert_eq!(format_exact(1 << 50), "1024T");
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(200 << 20), "200 MiB");
        assert_eq!(human(u64::MAX), "16384 PiB");
    }

    proptest! {
        #[test]
        fn exact_format_round_trips(n: u64) {
            prop_assert_eq!(parse_size(&format_exact(n)), Ok(n));
        }

        #[test]
        fn suffixes_multiply_in_any_case(n in 0u64..1 << 13, k in 0usize..5, lower: bool, tail in 0usize..3) {
            let (c, shift) = SUFFIXES[k];
            let c = if lower { c.to_ascii_lowercase() } else { c };
            let s = format!("{n}{c}{}", ["", "B", "iB"][tail]);
            prop_assert_eq!(parse_size(&s), Ok(n << shift));
        }

        #[test]
        fn overflow_is_refused(n in 1u64.., k in 0usize..5) {
            let (c, shift) = SUFFIXES[k];
            let s = format!("{n}{c}");
            match n.checked_mul(1 << shift) {
                Some(v) => prop_assert_eq!(parse_size(&s), Ok(v)),
                None => prop_assert_eq!(parse_size(&s), Err(SizeError::TooLarge)),
            }
        }

        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = parse_size(&s);
        }
    }
}
