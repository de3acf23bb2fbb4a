package io.croupier.proto;

/** The error codes of PROTOCOL §3: wire status, name and whether a retry may succeed. */
public enum ErrorCode {
  BAD_REQUEST(1, false),
  NOT_LEADER(2, true),
  CONGESTED(3, true),
  HARD_SPLIT(4, true),
  SOFT_SPLIT(5, true),
  UNKNOWN_SHUFFLE(6, false),
  UNKNOWN_APP(7, false),
  UNKNOWN_WORKER(8, true),
  DATA_LOST(9, false),
  STALE_LOCATION(10, false),
  TIMEOUT(11, true),
  UNAVAILABLE(12, true),
  NOT_ENOUGH_WORKERS(13, true),
  CONFLICT(14, false),
  NOT_COMMITTED(15, true),
  INTERNAL(16, false),
  QUOTA_EXCEEDED(17, false),
  UNAUTHORIZED(18, false);

  private final int status;
  private final boolean retriable;

  ErrorCode(int status, boolean retriable) {
    this.status = status;
    this.retriable = retriable;
  }

  /** The u16 status of the header. */
  public int status() {
    return status;
  }

  /** Whether §3 marks it retriable. */
  public boolean retriable() {
    return retriable;
  }

  /** The code of a wire status; {@link #INTERNAL} for an unknown one. */
  public static ErrorCode ofStatus(int status) {
    for (ErrorCode c : values()) {
      if (c.status == status) {
        return c;
      }
    }
    return INTERNAL;
  }
}
