package io.croupier.client;

import java.time.Duration;

/**
 * Settings of a {@link CroupierClient}, builder style: {@code new ClientOptions().requestTimeout(
 * Duration.ofSeconds(30))}. Every setting has a default that suits a Spark executor.
 */
public final class ClientOptions {
  private String tenantToken = System.getenv("CROUPIER_TENANT_TOKEN");
  private Duration requestTimeout = Duration.ofSeconds(30);
  private int retries = 3;
  private Duration connectTimeout = Duration.ofSeconds(10);
  private int pushBufferSize = 64 * 1024;
  private int pushMergeSize = 1024 * 1024;
  private int maxInFlightPerWorker = 8;
  private int maxRevivesPerPartition = 5;
  private Duration heartbeatInterval;
  private int smallFetchBatch = 128;
  private Duration fetchTimeout = Duration.ofSeconds(10);
  private Duration commitWaitTimeout = Duration.ofSeconds(300);
  private boolean failWhileRerunning = false;
  private Duration failoverDeadline = Duration.ofSeconds(60);
  private int fetchChunksInFlight = 3;
  private long writerMemoryLimit = 16L * 1024 * 1024;
  private boolean mapperEndBatching = true;

  /** The tenant's token sent with {@code REGISTER_APP} (default: $CROUPIER_TENANT_TOKEN). */
  public ClientOptions tenantToken(String token) {
    this.tenantToken = token;
    return this;
  }

  /** How long one request waits for its reply before it counts as {@code TIMEOUT} (30 s). */
  public ClientOptions requestTimeout(Duration d) {
    this.requestTimeout = d;
    return this;
  }

  /** How many times an idempotent request is retried, with a new request id (3). */
  public ClientOptions retries(int n) {
    this.retries = n;
    return this;
  }

  /** How long a connection may take to finish its ZMTP handshake (10 s). */
  public ClientOptions connectTimeout(Duration d) {
    this.connectTimeout = d;
    return this;
  }

  /** Target data size of one batch made by {@link MapWriter#write} (64 KiB). */
  public ClientOptions pushBufferSize(int bytes) {
    this.pushBufferSize = bytes;
    return this;
  }

  /** Batches to one worker are merged into one PUSH up to this many bytes (1 MiB). */
  public ClientOptions pushMergeSize(int bytes) {
    this.pushMergeSize = bytes;
    return this;
  }

  /** PUSH requests in flight per worker before a writer blocks (8). */
  public ClientOptions maxInFlightPerWorker(int n) {
    this.maxInFlightPerWorker = n;
    return this;
  }

  /** Revives after errors a writer allows per partition (5; splits are not counted). */
  public ClientOptions maxRevivesPerPartition(int n) {
    this.maxRevivesPerPartition = n;
    return this;
  }

  /** Fixed app heartbeat interval; {@code null} (the default) follows the master's pace. */
  public ClientOptions heartbeatInterval(Duration d) {
    this.heartbeatInterval = d;
    return this;
  }

  /** Locations asked in one {@code FETCH_SMALL} per worker (128; 0 turns it off). */
  public ClientOptions smallFetchBatch(int n) {
    this.smallFetchBatch = n;
    return this;
  }

  /** How long a fetch request waits for its reply (10 s); a copy that times out is read last. */
  public ClientOptions fetchTimeout(Duration d) {
    this.fetchTimeout = d;
    return this;
  }

  /** How long a reader waits for the shuffle's commit (300 s). */
  public ClientOptions commitWaitTimeout(Duration d) {
    this.commitWaitTimeout = d;
    return this;
  }

  /**
   * A reader that finds its shuffle uncommitted because some of its maps are being rerun
   * ({@code GET_LOST_MAPS} {@code rerunning}) fails at once with {@code NOT_COMMITTED} instead
   * of waiting for the commit (off). The Spark integration turns it on: such a reader is a task
   * of a stage attempt that already failed, and waiting would hold the executor slot that the
   * rerun's maps need.
   */
  public ClientOptions failWhileRerunning(boolean on) {
    this.failWhileRerunning = on;
    return this;
  }

  /** See {@link #failWhileRerunning(boolean)}. */
  public boolean failWhileRerunning() {
    return failWhileRerunning;
  }

  /** How long master calls keep retrying timeouts, UNAVAILABLE and NOT_LEADER (60 s). */
  public ClientOptions failoverDeadline(Duration d) {
    this.failoverDeadline = d;
    return this;
  }

  /** FETCH_CHUNK requests a reader keeps in flight per copy (3). */
  public ClientOptions fetchChunksInFlight(int n) {
    this.fetchChunksInFlight = n;
    return this;
  }

  /** Bytes {@link MapWriter#write} may buffer before it pushes its largest buffer (16 MiB). */
  public ClientOptions writerMemoryLimit(long bytes) {
    this.writerMemoryLimit = bytes;
    return this;
  }

  /**
   * Whether the {@code MAPPER_END}s of tasks that commit while another's is in flight go
   * together as one {@code MAPPER_END_BATCH} (true); false sends each alone, at once.
   */
  public ClientOptions mapperEndBatching(boolean on) {
    this.mapperEndBatching = on;
    return this;
  }

  /** See {@link #mapperEndBatching(boolean)}. */
  public boolean mapperEndBatching() {
    return mapperEndBatching;
  }

  /** See {@link #fetchTimeout(Duration)}. */
  public Duration fetchTimeout() {
    return fetchTimeout;
  }

  /** See {@link #commitWaitTimeout(Duration)}. */
  public Duration commitWaitTimeout() {
    return commitWaitTimeout;
  }

  /** See {@link #failoverDeadline(Duration)}. */
  public Duration failoverDeadline() {
    return failoverDeadline;
  }

  /** See {@link #fetchChunksInFlight(int)}. */
  public int fetchChunksInFlight() {
    return fetchChunksInFlight;
  }

  /** See {@link #writerMemoryLimit(long)}. */
  public long writerMemoryLimit() {
    return writerMemoryLimit;
  }

  /** See {@link #tenantToken(String)}. */
  public String tenantToken() {
    return tenantToken;
  }

  /** See {@link #requestTimeout(Duration)}. */
  public Duration requestTimeout() {
    return requestTimeout;
  }

  /** See {@link #retries(int)}. */
  public int retries() {
    return retries;
  }

  /** See {@link #connectTimeout(Duration)}. */
  public Duration connectTimeout() {
    return connectTimeout;
  }

  /** See {@link #pushBufferSize(int)}. */
  public int pushBufferSize() {
    return pushBufferSize;
  }

  /** See {@link #pushMergeSize(int)}. */
  public int pushMergeSize() {
    return pushMergeSize;
  }

  /** See {@link #maxInFlightPerWorker(int)}. */
  public int maxInFlightPerWorker() {
    return maxInFlightPerWorker;
  }

  /** See {@link #maxRevivesPerPartition(int)}. */
  public int maxRevivesPerPartition() {
    return maxRevivesPerPartition;
  }

  /** See {@link #heartbeatInterval(Duration)}. */
  public Duration heartbeatInterval() {
    return heartbeatInterval;
  }

  /** See {@link #smallFetchBatch(int)}. */
  public int smallFetchBatch() {
    return smallFetchBatch;
  }
}
