package io.croupier.proto;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.List;

/**
 * A reply: its header, its JSON body, and its payload frames (frames 2.., PROTOCOL §2).
 *
 * @param header the header (kind 1)
 * @param body the body; on an error, {@code {"code", "message", "details"}}
 * @param payloads the payload frames (FETCH_CHUNK, FETCH_SMALL)
 */
public record Reply(Header header, ObjectNode body, List<byte[]> payloads) {
  /** Parses a reply's frames. */
  public static Reply decode(List<byte[]> frames) {
    if (frames.size() < 2) {
      throw new CroupierException(ErrorCode.INTERNAL, "a reply of " + frames.size() + " frames");
    }
    Header h = Header.decode(frames.get(0));
    return new Reply(h, Json.decode(frames.get(1)), List.copyOf(frames.subList(2, frames.size())));
  }

  /** Whether the status is 0. */
  public boolean ok() {
    return header.status() == 0;
  }

  /** The error as an exception (call only when not {@link #ok()}). */
  public CroupierException error() {
    ErrorCode code = ErrorCode.ofStatus(header.status());
    String message = body.path("message").asText("");
    JsonNode details = body.path("details");
    return new CroupierException(code, message, details.isObject() ? details : null);
  }
}
