//! The log of the `hurricane` command and of a mount (whose log is its
//! standard error, `hurricane-mount.log` for a background mount). Messages
//! carry strings users chose: file names, attribute values, layouts. Each
//! event is written as one line whatever they hold: every control character
//! in it (line breaks, escape sequences, C1 controls, Unicode line
//! separators and bidirectional overrides) is written escaped (`\n`,
//! `\x1b`, `\u{202e}`), so no user can forge a line of the log or rewrite
//! the terminal of whoever reads it.

use std::io::{self, Write};

/// Whether `c` is written escaped.
fn hidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character [`hidden`] escaped, except one line break
/// at its end.
pub fn escape_line(text: &str) -> String {
    let (body, end) = match text.strip_suffix('\n') {
        Some(b) => (b, "\n"),
        None => (text, ""),
    };
    let mut out = String::with_capacity(text.len());
    for c in body.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if hidden(c) && (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push_str(end);
    out
}

/// Standard error, each event escaped (`tracing_subscriber`'s formatter
/// writes an event with one `write_all`).
pub struct EscapedStderr;

impl Write for EscapedStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let line = escape_line(&String::from_utf8_lossy(buf));
        io::stderr().lock().write_all(line.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// Starts the log: `RUST_LOG` (default `warn`) to standard error, escaped.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| EscapedStderr)
        .with_ansi(false)
        .with_target(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_string_cannot_start_a_line_or_move_the_cursor() {
        let forged = "setxattr: stripe\n2026-01-01T00:00:00Z  INFO root logged in\r\x1b[2K\u{202e}gpj.exe\n";
        let out = escape_line(forged);
        assert_eq!(out.matches('\n').count(), 1, "{out}");
        assert!(out.ends_with('\n'));
        assert!(!out.chars().any(|c| c != '\n' && hidden(c)), "{out}");
        assert_eq!(out, "setxattr: stripe\\n2026-01-01T00:00:00Z  INFO root logged in\\r\\x1b[2K\\u{202e}gpj.exe\n");
        // Plain text, accents and all, is left as it is.
        assert_eq!(escape_line("fichier été créé\n"), "fichier été créé\n");
    }
}
