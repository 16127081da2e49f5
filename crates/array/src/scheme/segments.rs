//! The chunk-level scheme of a `tween` array: TWEEN's log segments are the array's data stripes,
//! written only whole by the log layer (`crate::tween`), so md's path applies unchanged — a
//! full-stripe write with parity from a fresh encode, md's degraded reads, journal and rebuild.

use super::md::Md;
use super::{ChunkRead, ChunkWrite, CommitReport, UpdateScheme, WriteOutcome};
use crate::core::Core;
use crate::{Result, SchemeKind};

pub(crate) struct Segments;

impl UpdateScheme for Segments {
    fn kind(&self) -> SchemeKind {
        SchemeKind::Tween
    }
    fn read(&self, core: &Core, reqs: &mut [ChunkRead<'_>]) -> Result<()> {
        Md.read(core, reqs)
    }
    fn write(&self, core: &Core, writes: &[ChunkWrite<'_>]) -> Result<WriteOutcome> {
        Md.write(core, writes)
    }
    fn commit(&self, core: &Core) -> Result<CommitReport> {
        Md.commit(core)
    }
    fn has_pending(&self, core: &Core) -> bool {
        Md.has_pending(core)
    }
}
