package icetide.catalog;

import java.io.IOException;
import java.net.URI;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import org.apache.iceberg.LockManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * An Iceberg {@link LockManager} whose lock holds across processes on one machine (or one shared
 * POSIX file system), for the Hadoop catalog's commit.
 *
 * <p>The Hadoop catalog commits a table by checking that {@code metadata/v<N+1>.metadata.json}
 * does not exist and renaming its new metadata file there, between {@code acquire} and {@code
 * release} of its lock manager. Iceberg's default lock manager lives inside one JVM, and a local
 * rename replaces an existing file, so two processes that pass the check together both "succeed"
 * and one commit is lost. This manager takes, in addition to a lock between the threads of this
 * JVM, an OS file lock ({@link FileChannel#tryLock()}) on {@code metadata/.icetide-commit.lock}
 * of the table being committed. The OS releases it when the process dies, so a crashed writer
 * never blocks the table. The lock file starts with a dot: Iceberg's orphan-file removal never
 * lists it. It is never deleted (deleting it would let two processes lock two different files).
 *
 * <p>Tables outside the local file system ({@code hdfs://}, ...) get the in-JVM lock only, as with
 * Iceberg's default: HDFS's rename does not replace, so it is atomic there.
 *
 * <p>Catalog properties: {@code lock.acquire-timeout-ms} (default 180000, Iceberg's) bounds the
 * wait; {@code lock.acquire-interval-ms} (default 5 here) is the pause between attempts.
 */
public class FileLockManager implements LockManager {
  public static final String LOCK_FILE_NAME = ".icetide-commit.lock";
  static final String TIMEOUT_PROPERTY = "lock.acquire-timeout-ms";
  static final String INTERVAL_PROPERTY = "lock.acquire-interval-ms";

  private static final Logger LOG = LoggerFactory.getLogger(FileLockManager.class);
  // Static: every catalog instance of this JVM on the same table must see the same locks, and an
  // OS file lock is held per process (a second lock on the same file from this JVM would throw).
  private static final Map<String, Semaphore> JVM_LOCKS = new ConcurrentHashMap<>();
  private static final Map<String, Held> HELD = new ConcurrentHashMap<>();

  private long timeoutMs = 180_000L;
  private long intervalMs = 5L;

  private static final class Held {
    final String owner;
    final Semaphore jvmLock;
    final FileChannel channel; // null for a table outside the local file system
    final FileLock fileLock;

    Held(String owner, Semaphore jvmLock, FileChannel channel, FileLock fileLock) {
      this.owner = owner;
      this.jvmLock = jvmLock;
      this.channel = channel;
      this.fileLock = fileLock;
    }
  }

  @Override
  public void initialize(Map<String, String> properties) {
    this.timeoutMs = longProperty(properties, TIMEOUT_PROPERTY, timeoutMs);
    this.intervalMs = Math.max(1L, longProperty(properties, INTERVAL_PROPERTY, intervalMs));
  }

  private static long longProperty(Map<String, String> properties, String key, long fallback) {
    String value = properties.get(key);
    if (value == null || value.isEmpty()) {
      return fallback;
    }
    try {
      return Long.parseLong(value.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("catalog property " + key + " must be a whole number of ms: " + value, e);
    }
  }

  /** The lock file of the table that {@code entityId} (a metadata file path) belongs to, or null if not local. */
  static Path lockFile(String entityId) {
    URI uri = new org.apache.hadoop.fs.Path(entityId).toUri();
    if (uri.getScheme() != null && !"file".equals(uri.getScheme())) {
      return null;
    }
    Path metadataDir = Paths.get(uri.getPath()).getParent();
    return metadataDir == null ? null : metadataDir.resolve(LOCK_FILE_NAME);
  }

  private static String key(String entityId, Path lockFile) {
    if (lockFile != null) {
      return lockFile.toString();
    }
    org.apache.hadoop.fs.Path parent = new org.apache.hadoop.fs.Path(entityId).getParent();
    return parent == null ? entityId : parent.toString();
  }

  @Override
  public boolean acquire(String entityId, String ownerId) {
    Path lockFile = lockFile(entityId);
    String key = key(entityId, lockFile);
    Semaphore jvmLock = JVM_LOCKS.computeIfAbsent(key, k -> new Semaphore(1, true));
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
    try {
      if (!jvmLock.tryAcquire(timeoutMs, TimeUnit.MILLISECONDS)) {
        LOG.warn("timed out after {} ms waiting for the commit lock {} held in this JVM", timeoutMs, key);
        return false;
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
    if (lockFile == null) {
      HELD.put(key, new Held(ownerId, jvmLock, null, null));
      return true;
    }
    FileChannel channel = null;
    try {
      channel = FileChannel.open(lockFile, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
      while (true) {
        FileLock fileLock = channel.tryLock();
        if (fileLock != null) {
          HELD.put(key, new Held(ownerId, jvmLock, channel, fileLock));
          return true;
        }
        if (System.nanoTime() - deadline > 0) {
          LOG.warn("timed out after {} ms waiting for the commit lock {} held by another process", timeoutMs, key);
          break;
        }
        Thread.sleep(intervalMs);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (IOException | OverlappingFileLockException e) {
      LOG.warn("cannot take the commit lock {}: {}", key, e.toString());
    }
    closeQuietly(channel);
    jvmLock.release();
    return false;
  }

  @Override
  public boolean release(String entityId, String ownerId) {
    String key = key(entityId, lockFile(entityId));
    Held held = HELD.get(key);
    if (held == null || !held.owner.equals(ownerId) || !HELD.remove(key, held)) {
      return false;
    }
    try {
      if (held.fileLock != null) {
        held.fileLock.release();
      }
      return true;
    } catch (IOException e) {
      // Closing the channel below releases the OS lock as well.
      LOG.warn("releasing the commit lock {}: {}", key, e.toString());
      return true;
    } finally {
      closeQuietly(held.channel);
      held.jvmLock.release();
    }
  }

  private static void closeQuietly(FileChannel channel) {
    if (channel == null) {
      return;
    }
    try {
      channel.close();
    } catch (IOException e) {
      LOG.warn("closing a commit lock file: {}", e.toString());
    }
  }

  @Override
  public void close() {
    // Locks belong to commits in flight, which release them; nothing else is held.
  }
}
