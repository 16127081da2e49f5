//! The value of a [`ValueKind::Hash`](crate::record::ValueKind::Hash) record: a Redis hash's fields
//! in insertion order. Layout (little-endian, documented in `docs/kv.md`):
//! `count: u32`, then per field `field bytes: u32 ‖ field ‖ value bytes: u32 ‖ value`.

/// A decoded hash: (field, value) pairs, fields distinct, in insertion order.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Encode `fields` (the caller keeps them distinct).
pub fn encode(fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let bytes: usize = fields.iter().map(|(f, v)| 8 + f.len() + v.len()).sum();
    let mut out = Vec::with_capacity(4 + bytes);
    out.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    for (f, v) in fields {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

/// Bytes [`encode`] produces for these fields.
pub fn encoded_bytes<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> usize {
    4 + fields.map(|(f, v)| 8 + f.len() + v.len()).sum::<usize>()
}

/// Decode; the error names what is wrong (a record passed its checksum, so this means a bug or a
/// foreign writer, never a torn write).
pub fn decode(b: &[u8]) -> Result<Fields, String> {
    fn take<'a>(b: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], String> {
        let end = at
            .checked_add(n)
            .filter(|&e| e <= b.len())
            .ok_or_else(|| format!("hash value of {} bytes ends inside a field", b.len()))?;
        let s = &b[*at..end];
        *at = end;
        Ok(s)
    }
    fn len(b: &[u8], at: &mut usize) -> Result<usize, String> {
        let s = take(b, at, 4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
    }
    let mut at = 0;
    let count = len(b, &mut at)?;
    // Each field takes at least 8 bytes: a count beyond that is garbage, not an allocation size.
    if count > b.len() / 8 {
        return Err(format!(
            "hash value of {} bytes claims {count} fields",
            b.len()
        ));
    }
    let mut fields = Vec::with_capacity(count);
    for _ in 0..count {
        let n = len(b, &mut at)?;
        let f = take(b, &mut at, n)?.to_vec();
        let n = len(b, &mut at)?;
        let v = take(b, &mut at, n)?.to_vec();
        fields.push((f, v));
    }
    if at != b.len() {
        return Err(format!(
            "hash value has {} bytes after its last field",
            b.len() - at
        ));
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let f: Fields = vec![(b"a".to_vec(), b"1".to_vec()), (b"bb".to_vec(), Vec::new())];
        let e = encode(&f);
        assert_eq!(
            e.len(),
            encoded_bytes(f.iter().map(|(a, b)| (&a[..], &b[..])))
        );
        assert_eq!(decode(&e).unwrap(), f);
        assert_eq!(decode(&encode(&[])).unwrap(), Fields::new());
        for cut in 0..e.len() {
            assert!(decode(&e[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = e.clone();
        long.push(0);
        assert!(decode(&long).is_err());
        assert!(decode(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]).is_err());
    }
}
