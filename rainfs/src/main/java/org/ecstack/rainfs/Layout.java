package org.ecstack.rainfs;

import java.nio.file.Path;

/**
 * Names RainFS gives to its hidden files (seed §2.6.2).
 *
 * <ul>
 *   <li>On the managing NAS, beside the symlink {@code dir/name}: the metadata file
 *       {@code dir/.name.rfmeta}, the lock file {@code dir/.name.rflock}, and short-lived temporaries
 *       {@code dir/.name.<random>.rftmp} written and renamed into place.</li>
 *   <li>On every NAS: replica files {@code <nas>/.rainfs/<bucket>/<rndID>} (BUILDPATH of Algorithm 1), with
 *       bucket and rndID in hex; fsck copies go through {@code <rndID>.<random>.rftmp} in the same bucket.</li>
 * </ul>
 *
 * Names that look like these are reserved: RainFS refuses to create them and hides them from listings.
 */
final class Layout {
  static final String META_SUFFIX = ".rfmeta";
  static final String LOCK_SUFFIX = ".rflock";
  static final String TMP_SUFFIX = ".rftmp";

  private Layout() {}

  static Path metaFile(Path entry) {
    return entry.resolveSibling("." + entry.getFileName() + META_SUFFIX);
  }

  static Path lockFile(Path entry) {
    return entry.resolveSibling("." + entry.getFileName() + LOCK_SUFFIX);
  }

  static Path tmpFile(Path entry, long random) {
    return entry.resolveSibling("." + entry.getFileName() + "." + Long.toHexString(random) + TMP_SUFFIX);
  }

  /** The entry name a metadata file name belongs to, or null if {@code hidden} is not a metadata name. */
  static String entryOfMeta(String hidden) {
    if (hidden.startsWith(".") && hidden.endsWith(META_SUFFIX) && hidden.length() > 1 + META_SUFFIX.length()) {
      return hidden.substring(1, hidden.length() - META_SUFFIX.length());
    }
    return null;
  }

  /** True for names RainFS keeps for itself (hidden from listings, refused for new entries). */
  static boolean isReserved(String name) {
    if (name.equals(RainConfig.DATA_DIR)) {
      return true;
    }
    return name.startsWith(".")
        && (name.endsWith(META_SUFFIX) || name.endsWith(LOCK_SUFFIX) || name.endsWith(TMP_SUFFIX));
  }

  /** BUILDPATH(nas, bucket, rndID) of Algorithm 1. */
  static Path replica(Path nas, long bucket, long rndId) {
    return bucketDir(nas, bucket).resolve(String.format("%016x", rndId));
  }

  /**
   * The NAS mount a file lives on, for {@link NasGuard}: {@code <nas>} for a replica
   * {@code <nas>/.rainfs/<bucket>/<rndID>}, else the file's directory (a plain file in the namespace).
   */
  static Path nasOf(Path file) {
    Path bucket = file.getParent();
    Path data = bucket == null ? null : bucket.getParent();
    if (data != null && data.getFileName() != null && data.getFileName().toString().equals(RainConfig.DATA_DIR)
        && data.getParent() != null) {
      return data.getParent();
    }
    return bucket == null ? file : bucket;
  }

  static Path bucketDir(Path nas, long bucket) {
    return nas.resolve(RainConfig.DATA_DIR).resolve(String.format("%04x", bucket));
  }
}
