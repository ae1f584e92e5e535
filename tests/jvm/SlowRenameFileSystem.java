package icetide.testing;

import java.io.IOException;
import java.io.InterruptedIOException;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The local file system with a pause before each rename onto a table metadata file
 * ({@code v<N>.metadata.json}): the Hadoop catalog checks that the next version does not exist,
 * then renames onto it, and this widens the gap between the two to {@code
 * icetide.test.rename-delay-ms} (Hadoop conf, default 200), so that commits of several processes
 * race every time instead of once in a while. Used by tests/test_commit_lock.py only.
 */
public class SlowRenameFileSystem extends LocalFileSystem {
  @Override
  public boolean rename(Path src, Path dst) throws IOException {
    if (dst.getName().matches("v\\d+\\.metadata\\.json")) {
      try {
        Thread.sleep(getConf().getLong("icetide.test.rename-delay-ms", 200L));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new InterruptedIOException("interrupted before a rename");
      }
    }
    return super.rename(src, dst);
  }
}
