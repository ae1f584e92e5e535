package icetide.state;

import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;

/**
 * Spark 3.5's RocksDB state store provider, minus one needless reload per micro-batch.
 *
 * <p>A streaming aggregation opens two stores on the same RocksDB instance in each task: a read
 * store (StateStoreRestoreExec) and a write store (StateStoreSaveExec). After the write store
 * commits, Spark aborts the read store, and in 3.5 RocksDB's abort is a rollback that forgets
 * the loaded version: the next micro-batch closes the database, reloads the last uploaded
 * snapshot and replays every changelog since (SPARK-51955, fixed in Spark 4.1 by releasing
 * read stores instead).
 *
 * <p>Here the read store's abort is skipped when the write store opened after it has committed:
 * a read store never writes, so there is nothing to undo, and the committed version stays
 * loaded. In every other case (the task failed before its write store committed) the abort
 * rolls back as before, so a retried task never sees half-written state.
 */
public class ReusingRocksDBProvider extends RocksDBStateStoreProvider {
  private volatile StateStore written;

  @Override
  public StateStore getStore(long version) {
    StateStore store = super.getStore(version);
    written = store;
    return store;
  }

  @Override
  public StateStore getReadStore(long version) {
    StateStore store = super.getStore(version);
    return new ReadStore(store);
  }

  /** The read view of a store: everything passes through, except an abort after a commit. */
  private final class ReadStore implements StateStore {
    private final StateStore store;

    ReadStore(StateStore store) {
      this.store = store;
    }

    @Override
    public void abort() {
      StateStore writer = written;
      if (writer != null && writer != store && writer.hasCommitted()) {
        return;
      }
      store.abort();
    }

    @Override
    public StateStoreId id() {
      return store.id();
    }

    @Override
    public long version() {
      return store.version();
    }

    @Override
    public UnsafeRow get(UnsafeRow key) {
      return store.get(key);
    }

    @Override
    public scala.collection.Iterator<UnsafeRowPair> prefixScan(UnsafeRow prefixKey) {
      return store.prefixScan(prefixKey);
    }

    @Override
    public scala.collection.Iterator<UnsafeRowPair> iterator() {
      return store.iterator();
    }

    @Override
    public void put(UnsafeRow key, UnsafeRow value) {
      store.put(key, value);
    }

    @Override
    public void remove(UnsafeRow key) {
      store.remove(key);
    }

    @Override
    public long commit() {
      return store.commit();
    }

    @Override
    public StateStoreMetrics metrics() {
      return store.metrics();
    }

    @Override
    public boolean hasCommitted() {
      return store.hasCommitted();
    }
  }
}
