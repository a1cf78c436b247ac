//! The protobuf wire format: field keys, varints, fixed-width numbers and
//! length-delimited payloads, read without copying.

use super::ProtoError;

/// One field value as it appears on the wire; what it means depends on the
/// schema, which the caller applies afterwards.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Payload<'a> {
    /// Wire type 0: int32, int64, bool (and packed elements of those).
    Varint(u64),
    /// Wire type 1: double.
    Fixed64(u64),
    /// Wire type 5: float and fixed32; Kubernetes has none, but unknown
    /// fields of this type must still be skipped.
    Fixed32(u32),
    /// Wire type 2: string, bytes, embedded message, map entry, packed list.
    Bytes(&'a [u8]),
}

impl Payload<'_> {
    /// Wire type number, for error messages.
    pub(crate) fn wire_type(&self) -> u8 {
        match self {
            Payload::Varint(_) => 0,
            Payload::Fixed64(_) => 1,
            Payload::Bytes(_) => 2,
            Payload::Fixed32(_) => 5,
        }
    }
}

/// Largest field number protobuf allows (2^29 - 1).
const MAX_TAG: u64 = (1 << 29) - 1;

/// A cursor over one message's bytes.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn truncated(&self) -> ProtoError {
        ProtoError::Truncated { offset: self.pos }
    }

    /// A base-128 varint of at most ten bytes. Bits beyond 64 in the tenth
    /// byte are dropped rather than rejected, as Go's decoders do.
    pub(crate) fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = *self.buf.get(self.pos).ok_or_else(|| self.truncated())?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtoError::VarintOverflow {
            offset: self.pos - 10,
        })
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], ProtoError> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| self.truncated())?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    pub(crate) fn fixed64(&mut self) -> Result<u64, ProtoError> {
        let bytes = self.take(8)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(array))
    }

    fn fixed32(&mut self) -> Result<u32, ProtoError> {
        let bytes = self.take(4)?;
        let mut array = [0u8; 4];
        array.copy_from_slice(bytes);
        Ok(u32::from_le_bytes(array))
    }

    /// The next field's number and payload, or `None` at the end.
    ///
    /// Reading a field's whole payload is also how unknown fields are
    /// skipped. Groups (wire types 3 and 4) are rejected: proto2 deprecated
    /// them and no Kubernetes type uses them, so they only appear in garbage.
    pub(crate) fn field(&mut self) -> Result<Option<(u32, Payload<'a>)>, ProtoError> {
        if self.is_empty() {
            return Ok(None);
        }
        let start = self.pos;
        let key = self.varint()?;
        let tag = key >> 3;
        if tag == 0 || tag > MAX_TAG {
            return Err(ProtoError::InvalidTag { offset: start });
        }
        let payload = match key & 7 {
            0 => Payload::Varint(self.varint()?),
            1 => Payload::Fixed64(self.fixed64()?),
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| self.truncated())?;
                Payload::Bytes(self.take(len)?)
            }
            5 => Payload::Fixed32(self.fixed32()?),
            other => {
                return Err(ProtoError::UnsupportedWireType {
                    offset: start,
                    wire_type: other as u8,
                });
            }
        };
        // `tag` fits: it was checked against MAX_TAG above.
        Ok(Some((tag as u32, payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_decode_and_overflow_is_reported() {
        assert_eq!(Reader::new(&[0x96, 0x01]).varint(), Ok(150));
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Reader::new(&max).varint(), Ok(u64::MAX));
        assert_eq!(
            Reader::new(&[0xff; 11]).varint(),
            Err(ProtoError::VarintOverflow { offset: 0 })
        );
        assert_eq!(
            Reader::new(&[0x80]).varint(),
            Err(ProtoError::Truncated { offset: 1 })
        );
    }

    #[test]
    fn fields_of_every_wire_type() {
        let bytes = [
            0x08, 0x01, // 1: varint 1
            0x11, 1, 0, 0, 0, 0, 0, 0, 0, // 2: fixed64 1
            0x1a, 0x02, b'h', b'i', // 3: bytes "hi"
            0x25, 2, 0, 0, 0, // 4: fixed32 2
        ];
        let mut reader = Reader::new(&bytes);
        assert_eq!(reader.field(), Ok(Some((1, Payload::Varint(1)))));
        assert_eq!(reader.field(), Ok(Some((2, Payload::Fixed64(1)))));
        assert_eq!(reader.field(), Ok(Some((3, Payload::Bytes(b"hi")))));
        assert_eq!(reader.field(), Ok(Some((4, Payload::Fixed32(2)))));
        assert_eq!(reader.field(), Ok(None));
    }

    #[test]
    fn malformed_keys_and_lengths_are_errors() {
        assert_eq!(
            Reader::new(&[0x00, 0x01]).field(),
            Err(ProtoError::InvalidTag { offset: 0 })
        );
        assert_eq!(
            Reader::new(&[0x0b]).field(),
            Err(ProtoError::UnsupportedWireType {
                offset: 0,
                wire_type: 3
            })
        );
        // A length far beyond the buffer must not overflow or allocate.
        let huge = [
            0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert_eq!(
            Reader::new(&huge).field(),
            Err(ProtoError::Truncated { offset: 11 })
        );
    }
}
