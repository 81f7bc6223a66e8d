//! Little-endian binary encoding shared by every on-disk structure.
//!
//! The decoder is bounded: every length read from disk is checked against the
//! bytes that remain, so corrupt input yields `Error::Corrupt` instead of a
//! panic or an oversized allocation (the fuzz targets rely on this).

use crate::error::{Error, Result};

#[derive(Default, Debug, Clone)]
pub struct Encoder {
    pub buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn with_capacity(n: usize) -> Self {
        Encoder { buf: Vec::with_capacity(n) }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    /// Length-prefixed (u32) byte string.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.raw(v)
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    /// An unsigned LEB128 number: 7 bits a byte, low bits first, the high
    /// bit set on every byte but the last (1 byte up to 127, 10 at most).
    pub fn var(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }
    /// Bytes behind a [`Encoder::var`] length.
    pub fn var_bytes(&mut self, v: &[u8]) -> &mut Self {
        self.var(v.len() as u64);
        self.raw(v)
    }
    pub fn var_str(&mut self, v: &str) -> &mut Self {
        self.var_bytes(v.as_bytes())
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Decoder<'a> {
    /// `what` names the structure in error messages.
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Decoder { buf, pos: 0, what }
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    pub fn err(&self, detail: impl Into<String>) -> Error {
        Error::corrupt(self.what, format!("at byte {}: {}", self.pos, detail.into()))
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(format!("needs {} bytes, {} left", n, self.remaining())));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> Result<&'a str> {
        let b = self.bytes()?;
        std::str::from_utf8(b).map_err(|_| self.err("string is not UTF-8"))
    }
    /// A count of items that each take at least `min_item` bytes: refuses counts
    /// the remaining input could not hold, so a corrupt count cannot force a huge
    /// allocation.
    pub fn count(&mut self, min_item: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(self.err(format!("count {n} exceeds remaining input")));
        }
        Ok(n)
    }
    /// Whether the input at the current position starts with `prefix`.
    pub fn starts_with(&self, prefix: &[u8]) -> bool {
        self.buf[self.pos..].starts_with(prefix)
    }
    /// A number written by [`Encoder::var`]. Strict: a longer encoding than
    /// the number needs (a last byte of 0 after the first) and bits past 64
    /// are corrupt, so every number has exactly one encoding.
    pub fn var(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(self.err("number past 64 bits"));
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    return Err(self.err("number encoded longer than it needs"));
                }
                return Ok(v);
            }
        }
        Err(self.err("number past 64 bits"))
    }
    /// A [`Decoder::var`] that must fit in a u32.
    pub fn var32(&mut self) -> Result<u32> {
        let v = self.var()?;
        u32::try_from(v).map_err(|_| self.err(format!("{v} does not fit in 32 bits")))
    }
    /// [`Decoder::count`] for a [`Encoder::var`] count.
    pub fn var_count(&mut self, min_item: usize) -> Result<usize> {
        let n = usize::try_from(self.var()?).unwrap_or(usize::MAX);
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(self.err(format!("count {n} exceeds remaining input")));
        }
        Ok(n)
    }
    pub fn var_bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.var_count(1)?;
        self.take(n)
    }
    pub fn var_str(&mut self) -> Result<&'a str> {
        let b = self.var_bytes()?;
        std::str::from_utf8(b).map_err(|_| self.err("string is not UTF-8"))
    }
    pub fn expect_end(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(self.err(format!("{} trailing bytes", self.remaining())));
        }
        Ok(())
    }
}

pub fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let mut e = Encoder::new();
        e.u8(7).u16(300).u32(70000).u64(1 << 40).i64(-5).str("héllo").bytes(&[1, 2, 3]);
        let b = e.into_inner();
        let mut d = Decoder::new(&b, "test");
        assert_eq!(d.u8().unwrap(), 7);
        assert_eq!(d.u16().unwrap(), 300);
        assert_eq!(d.u32().unwrap(), 70000);
        assert_eq!(d.u64().unwrap(), 1 << 40);
        assert_eq!(d.i64().unwrap(), -5);
        assert_eq!(d.str().unwrap(), "héllo");
        assert_eq!(d.bytes().unwrap(), &[1, 2, 3]);
        d.expect_end().unwrap();
        // Truncated input is an error, not a panic.
        let mut d = Decoder::new(&b[..3], "test");
        d.u8().unwrap();
        assert!(d.u32().is_err());
        // A huge count is refused.
        let huge = u32::MAX.to_le_bytes();
        assert!(Decoder::new(&huge, "test").count(1).is_err());
    }

    #[test]
    fn numbers_have_one_encoding_and_round_trip() {
        for v in [0, 1, 127, 128, 300, 1 << 20, u64::from(u32::MAX), u64::MAX - 1, u64::MAX] {
            let mut e = Encoder::new();
            e.var(v);
            let b = e.into_inner();
            assert_eq!(b.len(), (64 - v.leading_zeros() as usize).div_ceil(7).max(1), "{v}");
            let mut d = Decoder::new(&b, "test");
            assert_eq!(d.var().unwrap(), v);
            d.expect_end().unwrap();
            // Every shorter prefix is truncated input.
            for k in 0..b.len() {
                assert!(Decoder::new(&b[..k], "test").var().is_err());
            }
        }
        // Longer than needed, and past 64 bits: corrupt.
        assert!(Decoder::new(&[0x80, 0x00], "test").var().is_err());
        assert!(Decoder::new(&[0xff; 9].iter().copied().chain([0x02]).collect::<Vec<_>>(), "test").var().is_err());
        assert!(Decoder::new(&[0x80; 11], "test").var().is_err());
        assert!(Decoder::new(&[0x80, 0x80, 0x80, 0x80, 0x10], "test").var32().is_err());
        // A count the input cannot hold is refused before any allocation.
        assert!(Decoder::new(&[0xff, 0xff, 0xff, 0xff, 0x0f], "test").var_count(1).is_err());
        let mut e = Encoder::new();
        e.var_str("héllo").var_bytes(&[9; 200]);
        let b = e.into_inner();
        let mut d = Decoder::new(&b, "test");
        assert_eq!(d.var_str().unwrap(), "héllo");
        assert_eq!(d.var_bytes().unwrap(), &[9; 200][..]);
        d.expect_end().unwrap();
    }
}
