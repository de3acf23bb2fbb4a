package io.croupier.proto;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;

/** The JSON bodies (PROTOCOL §1: a UTF-8 JSON object per message), through Jackson. */
public final class Json {
  private static final ObjectMapper MAPPER = new ObjectMapper();

  private Json() {}

  /** A new empty object. */
  public static ObjectNode object() {
    return MAPPER.createObjectNode();
  }

  /** A new empty array. */
  public static ArrayNode array() {
    return MAPPER.createArrayNode();
  }

  /** The compact UTF-8 bytes of {@code node}. */
  public static byte[] encode(JsonNode node) {
    try {
      return MAPPER.writeValueAsBytes(node);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot encode a JSON body", e);
    }
  }

  /**
   * Parses a body frame (it must be an object).
   *
   * @throws CroupierException INTERNAL when a server sent something else
   */
  public static ObjectNode decode(byte[] frame) {
    try {
      JsonNode n = MAPPER.readTree(frame);
      if (n instanceof ObjectNode o) {
        return o;
      }
    } catch (IOException e) {
      throw new CroupierException(ErrorCode.INTERNAL, "a server sent a malformed JSON body: " + e.getMessage());
    }
    throw new CroupierException(ErrorCode.INTERNAL, "a server sent a JSON body that is not an object");
  }

  /** The JSON text of {@code node}. */
  public static String text(JsonNode node) {
    return node.toString();
  }
}
