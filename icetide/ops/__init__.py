"""Operations beside a run: Prometheus metrics, the runner lock, stop signals."""
