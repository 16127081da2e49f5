//! The chunk calls every OSD answers as a holder, over its own chunk store: PutChunk (store a
//! whole chunk whose bytes arrive as a stream), GetChunk (a byte range of a chunk, with its
//! header) and ChunkVersion (a chunk's versions, which a primary learns its view from). UpdateChunk
//! and ApplyDelta are the update scheme's (`update/`), DeleteChunk is `delete.rs`'s.

use bytes::Bytes;
use tokio_stream::StreamExt;

use crate::api::ChunkMeta;
use crate::chunk_store::{ChunkImage, ChunkStoreError};
use crate::error::OsdError;
use crate::service::Osd;

impl Osd {
    /// PutChunk: stores chunk `meta` whose bytes arrive as `frames` (each a message's data as the
    /// slices it arrived in). Each frame is copied once, into the image of the file the store
    /// writes; a stream that ends short is refused by the store (nothing written).
    pub(crate) async fn put_chunk_here(
        &self,
        meta: ChunkMeta,
        mut frames: impl tokio_stream::Stream<Item = Result<Vec<Bytes>, OsdError>> + Unpin,
    ) -> Result<(), OsdError> {
        let mut image = ChunkImage::new(&meta).map_err(OsdError::Invalid)?;
        while let Some(slices) = frames.next().await {
            for d in &slices? {
                image.push(d).map_err(OsdError::Invalid)?
            }
        }
        self.blocking(move |st| st.put_image(image)).await?;
        Ok(())
    }

    /// GetChunk: `length` bytes of chunk `index` from `offset` (0: to the end of the chunk), with
    /// the chunk's header.
    pub(crate) async fn get_chunk_here(
        &self,
        segment: u64,
        index: u32,
        offset: u64,
        length: u64,
    ) -> Result<(ChunkMeta, Bytes), OsdError> {
        let got = self
            .blocking(move |s| {
                let len = if length == 0 {
                    let meta = s
                        .meta(segment, index)?
                        .ok_or(ChunkStoreError::NotFound { segment, index })?;
                    meta.chunk_bytes.saturating_sub(offset)
                } else {
                    length
                };
                s.read(segment, index, offset, len)
            })
            .await?;
        Ok(got)
    }

    /// ChunkVersion: the header of chunk `index` (`None`: not stored here).
    pub(crate) async fn chunk_meta_here(
        &self,
        segment: u64,
        index: u32,
    ) -> Result<Option<ChunkMeta>, OsdError> {
        Ok(self.blocking(move |s| s.meta(segment, index)).await?)
    }
}
