package io.croupier.proto;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;

/**
 * An error reply of a Croupier server (PROTOCOL §3), or an error the client raises itself with
 * one of the same codes ({@code TIMEOUT}, {@code UNAVAILABLE}, ...).
 *
 * <p>{@link #code()} is the wire code, {@link #details()} the reply's {@code details} object
 * (never null), {@link #retriable()} what §3's table says.
 */
public class CroupierException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final ErrorCode code;
  private final transient JsonNode details;

  /** An error with the given code, message and details ({@code null}: empty). */
  public CroupierException(ErrorCode code, String message, JsonNode details) {
    super(code.name() + ": " + message);
    this.code = code;
    this.details = details == null ? JsonNodeFactory.instance.objectNode() : details;
  }

  /** An error with the given code and message, and empty details. */
  public CroupierException(ErrorCode code, String message) {
    this(code, message, (JsonNode) null);
  }

  /** An error with a cause. */
  public CroupierException(ErrorCode code, String message, Throwable cause) {
    this(code, message, (JsonNode) null);
    initCause(cause);
  }

  /** The wire code. */
  public ErrorCode code() {
    return code;
  }

  /** The reply's {@code details} (an object; empty when the reply had none). */
  public JsonNode details() {
    return details;
  }

  /** Whether PROTOCOL §3 calls the code retriable. */
  public boolean retriable() {
    return code.retriable();
  }
}
