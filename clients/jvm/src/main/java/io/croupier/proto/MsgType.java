package io.croupier.proto;

/** The message types a client sends (PROTOCOL §4 and §5.2). */
public final class MsgType {
  public static final int PING = 1;
  public static final int REGISTER_APP = 20;
  public static final int APP_HEARTBEAT = 21;
  public static final int UNREGISTER_APP = 22;
  public static final int REGISTER_SHUFFLE = 30;
  public static final int REVIVE_PARTITION = 31;
  public static final int MAPPER_END = 32;
  public static final int GET_LOCATIONS = 34;
  public static final int UNREGISTER_SHUFFLE = 35;
  public static final int GET_SHUFFLE = 36;
  public static final int GET_LOCATIONS_BATCH = 37;
  public static final int RERUN_MAPS = 38;
  public static final int GET_LOST_MAPS = 39;
  public static final int STATUS = 40;
  public static final int MAPPER_END_BATCH = 43;
  public static final int PUSH = 50;
  public static final int OPEN_STREAM = 53;
  public static final int FETCH_CHUNK = 54;
  public static final int FETCH_SMALL = 58;

  private MsgType() {}

  /** Whether the type is open (§2.1): sent unsigned. */
  public static boolean open(int type) {
    return type == PING || type == STATUS || type == REGISTER_APP;
  }
}
