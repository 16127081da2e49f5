//! Deletion: DeleteChunk (remove one chunk from this OSD's store) and delete tasks from the MDS
//! (the chunks of a removed or replaced segment), after which the primary forgets the segment.
//! Running one twice is harmless: a chunk already gone is not an error to the store.

use crate::error::OsdError;
use crate::service::Osd;

impl Osd {
    /// DeleteChunk: remove chunk `index` of a segment from this OSD's store.
    pub(crate) async fn delete_chunk_here(&self, segment: u64, index: u32) -> Result<(), OsdError> {
        self.blocking(move |s| s.delete(segment, index)).await?;
        Ok(())
    }

    /// Remove chunks (a DeleteTask).
    pub async fn delete_chunks(&self, segment: u64, chunks: &[u32]) -> Result<(), OsdError> {
        for &i in chunks {
            self.delete_chunk_here(segment, i).await?;
        }
        self.inner
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&segment);
        Ok(())
    }
}
