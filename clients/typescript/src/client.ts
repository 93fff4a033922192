// A thin typed client over @grpc/grpc-js and the protobuf-es generated messages: one
// camelCase method per RPC, plain objects in, generated message types out, typed errors.
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import {
  AddBatchRequestSchema,
  AddRequestSchema,
  DeleteRequestSchema,
  EndSessionRequestSchema,
  ExportRequestSchema,
  GetRequestSchema,
  ImportRequestSchema,
  ListMemoriesRequestSchema,
  ListUsersRequestSchema,
  Kind,
  MemoryService,
  PruneRequestSchema,
  PruneStrategy,
  RenderContextRequestSchema,
  RetrieveRequestSchema,
  Role,
  Source,
  Tier,
  UsageRequestSchema,
  type AddBatchResponse,
  type AddRequest,
  type AddResponse,
  type DeleteResponse,
  type EndSessionResponse,
  type ExportHeader,
  type ExportResponse,
  type ExportTrailer,
  type GetResponse,
  type ImportResponse,
  type ListMemoriesResponse,
  type ListUsersResponse,
  type MemoryItem,
  type PruneResponse,
  type RenderContextResponse,
  type RetrieveResponse,
  type UsageResponse,
} from "./gen/memoryd/v1/memory_pb.js";
import { ExportCorrupt, fromServiceError } from "./errors.js";
import { CHECKSUM_FORMAT, Checksum, FORMAT_VERSION } from "./exportFormat.js";

const USER_AGENT = "memoryd-client-typescript/0.1.0";

/** Retries of UNAVAILABLE with exponential backoff, done by grpc-js from the channel's
 * service config (gRFC A6), as in the Python client. */
export interface RetryPolicy {
  maxAttempts: number;
  initialBackoffS: number;
  maxBackoffS: number;
  backoffMultiplier: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 4, initialBackoffS: 0.1, maxBackoffS: 2, backoffMultiplier: 2 };

export interface ClientOptions {
  /** Sent as `authorization: Bearer <apiKey>` on every call. */
  apiKey?: string;
  /** TLS with the system roots (implied by the options below). */
  tls?: boolean;
  /** PEM of a private CA (bytes or a file path). */
  rootCertificates?: Buffer | string;
  /** mTLS pair (PEM bytes or file paths). */
  certificateChain?: Buffer | string;
  privateKey?: Buffer | string;
  /** Default deadline of unary calls, ms (default 10 s); 0 for none. */
  timeoutMs?: number;
  /** Default deadline of Export / Import streams, ms (default 300 s). */
  streamTimeoutMs?: number;
  /** null turns retries off. */
  retry?: RetryPolicy | null;
}

export interface CallOptions {
  timeoutMs?: number;
  requestId?: string;
}

// The names a caller may write, derived from the generated enums (never copied: a tier added
// to the proto is a name here once `make gen-clients` has run).
type EnumName<E> = Lowercase<Exclude<keyof E & string, "UNSPECIFIED">>;
export type TierName = EnumName<typeof Tier>;
export type KindName = EnumName<typeof Kind>;
// `string & {}` keeps the names' completions while accepting any spelling enumValue parses.
type TierLike = Tier | TierName | (string & {});
type KindLike = Kind | KindName | (string & {});

function enumValue<E extends Record<string, string | number>>(enumObj: E, prefix: string, value: number | string): number {
  if (typeof value === "number") return value;
  // protobuf-es names members without the proto prefix: Tier.LONG_TERM for TIER_LONG_TERM.
  const name = value.trim().toUpperCase().replace(/-/g, "_").replace(new RegExp(`^${prefix}`), "");
  const number = (enumObj as Record<string, unknown>)[name];
  if (typeof number !== "number" || number === 0) {
    throw new TypeError(`unknown ${prefix.slice(0, -1).toLowerCase()} ${JSON.stringify(value)}`);
  }
  return number;
}

export const tier = (v: TierLike): Tier => enumValue(Tier, "TIER_", v);
export const kind = (v: KindLike): Kind => enumValue(Kind, "KIND_", v);

export interface Scope {
  userId: string;
  agentId?: string;
  sessionId?: string;
  taskId?: string;
}

type Init<D extends DescMessage> = MessageInitShape<D>;
type Without<D extends DescMessage, K extends string> = Omit<Exclude<Init<D>, { $typeName: string }>, K | "scope" | "$typeName">;

export type AddArgs = Scope &
  Without<typeof AddRequestSchema, "tier" | "kind" | "role" | "source"> & {
    tier?: TierLike;
    kind?: KindLike;
    role?: Role | string;
    source?: Source | string;
  };
export type RetrieveArgs = Scope & Without<typeof RetrieveRequestSchema, "tiers" | "kinds"> & { tiers?: TierLike[]; kinds?: KindLike[] };
export type LookupArgs = Scope & { tier: TierLike; ids?: string[]; keys?: string[] };
export type PruneArgs = Scope & Without<typeof PruneRequestSchema, "tiers" | "strategy"> & { tiers?: TierLike[]; strategy: PruneStrategy | string };
export type ExportArgs = Scope & { tiers?: TierLike[]; includeArchived?: boolean };
export type RenderContextArgs = Scope & Without<typeof RenderContextRequestSchema, "tiers"> & { tiers?: TierLike[] };
export type EndSessionArgs = Scope & { extractFacts?: boolean };
export type ListUsersArgs = { userIdPrefix?: string; pageSize?: number; pageToken?: string };
export type ListMemoriesArgs = Scope &
  Without<typeof ListMemoriesRequestSchema, "tiers" | "kinds"> & { tiers?: TierLike[]; kinds?: KindLike[] };

function split<T extends Scope>(args: T): [Scope, Omit<T, keyof Scope>] {
  const { userId, agentId = "", sessionId = "", taskId = "", ...rest } = args;
  return [{ userId, agentId, sessionId, taskId }, rest];
}

function addRequest(args: AddArgs): AddRequest {
  const [scope, { tier: t = "long_term", kind: k, role, source, ...rest }] = split(args);
  return create(AddRequestSchema, {
    ...rest,
    scope,
    tier: tier(t),
    kind: k === undefined ? 0 : kind(k),
    role: role === undefined ? 0 : enumValue(Role, "ROLE_", role),
    source: source === undefined ? 0 : enumValue(Source, "SOURCE_", source),
  });
}

function pem(value: Buffer | string | undefined): Buffer | null {
  if (value === undefined) return null;
  return typeof value === "string" ? readFileSync(value) : value;
}

/** What an export iterates: items checked as they arrive against the trailer's count and
 * checksum (ExportCorrupt when they do not match). */
export class ExportStream implements AsyncIterable<MemoryItem> {
  header?: ExportHeader;
  trailer?: ExportTrailer;
  verified = false;
  constructor(private readonly stream: grpc.ClientReadableStream<ExportResponse>, private readonly requestId: string) {}

  async *messages(): AsyncGenerator<ExportResponse> {
    const sum = new Checksum();
    try {
      for await (const message of this.stream as AsyncIterable<ExportResponse>) {
        if (this.trailer) throw new ExportCorrupt("a message follows the trailer");
        const payload = message.payload;
        if (payload.case === "header") this.header = payload.value;
        else if (payload.case === "item") sum.add(payload.value);
        else if (payload.case === "trailer") {
          this.trailer = payload.value;
          if (Number(payload.value.itemCount) !== sum.count) {
            throw new ExportCorrupt(`the trailer counts ${payload.value.itemCount} items; ${sum.count} arrived`);
          }
          if (payload.value.checksumSha256 && payload.value.checksumFormat === CHECKSUM_FORMAT) {
            if (payload.value.checksumSha256 !== sum.hexdigest()) throw new ExportCorrupt("the checksum does not match the items");
            this.verified = true;
          }
        }
        yield message;
      }
    } catch (err) {
      if (err instanceof ExportCorrupt) throw err;
      throw fromServiceError(err as grpc.ServiceError, this.requestId);
    }
    if (!this.trailer) throw new ExportCorrupt("the stream ended without its trailer");
  }

  async *[Symbol.asyncIterator](): AsyncIterator<MemoryItem> {
    for await (const message of this.messages()) {
      if (message.payload.case === "item") yield message.payload.value;
    }
  }
}

/** A memoryd client over one grpc-js channel; `close()` it when done.
 *
 *     const client = new MemoryClient("127.0.0.1:50051", { apiKey: "..." });
 *     await client.add({ userId: "ana", content: "Prefers window seats", tier: "long_term" });
 *     const hits = await client.retrieve({ userId: "ana", query: "seats", topK: 5 });
 *     console.log(hits.items[0].content, hits.items[0].score);
 */
export class MemoryClient {
  private readonly client: grpc.Client;
  private readonly apiKey?: string;
  private readonly timeoutMs: number;
  private readonly streamTimeoutMs: number;

  constructor(target: string, options: ClientOptions = {}) {
    this.apiKey = options.apiKey;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.streamTimeoutMs = options.streamTimeoutMs ?? 300_000;
    const secure = options.tls || options.rootCertificates !== undefined || options.certificateChain !== undefined;
    if ((options.certificateChain === undefined) !== (options.privateKey === undefined)) {
      throw new TypeError("mTLS needs both certificateChain and privateKey");
    }
    const credentials = secure
      ? grpc.credentials.createSsl(pem(options.rootCertificates), pem(options.privateKey), pem(options.certificateChain))
      : grpc.credentials.createInsecure();
    const retry = options.retry === undefined ? DEFAULT_RETRY : options.retry;
    const channelOptions: grpc.ChannelOptions = { "grpc.primary_user_agent": USER_AGENT };
    if (retry && retry.maxAttempts > 1) {
      channelOptions["grpc.service_config"] = JSON.stringify({
        methodConfig: [
          {
            name: [{ service: MemoryService.typeName }, { service: "grpc.health.v1.Health" }],
            retryPolicy: {
              maxAttempts: retry.maxAttempts,
              initialBackoff: `${retry.initialBackoffS}s`,
              maxBackoff: `${retry.maxBackoffS}s`,
              backoffMultiplier: retry.backoffMultiplier,
              retryableStatusCodes: ["UNAVAILABLE"],
            },
          },
        ],
      });
    } else {
      channelOptions["grpc.enable_retries"] = 0;
    }
    this.client = new grpc.Client(target, credentials, channelOptions);
  }

  close(): void {
    this.client.close();
  }

  private metadata(requestId: string): grpc.Metadata {
    const metadata = new grpc.Metadata();
    metadata.set("x-request-id", requestId);
    if (this.apiKey) metadata.set("authorization", `Bearer ${this.apiKey}`);
    return metadata;
  }

  private deadline(timeoutMs: number): grpc.CallOptions {
    return timeoutMs > 0 ? { deadline: Date.now() + timeoutMs } : {};
  }

  private unary<I extends DescMessage, O extends DescMessage>(
    name: string,
    input: I,
    output: O,
    request: MessageShape<I>,
    options: CallOptions = {},
    service = `/${MemoryService.typeName}/`,
  ): Promise<MessageShape<O>> {
    const requestId = options.requestId ?? randomUUID().replace(/-/g, "");
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        service + name,
        (m: MessageShape<I>) => Buffer.from(toBinary(input, m)),
        (b: Buffer) => fromBinary(output, b),
        request,
        this.metadata(requestId),
        this.deadline(options.timeoutMs ?? this.timeoutMs),
        (err, reply) => (err ? reject(fromServiceError(err, requestId)) : resolve(reply as MessageShape<O>)),
      );
    });
  }

  private method<K extends keyof typeof MemoryService.method>(key: K) {
    return MemoryService.method[key];
  }

  add(args: AddArgs, options?: CallOptions): Promise<AddResponse> {
    const m = this.method("add");
    return this.unary(m.name, m.input, m.output, addRequest(args), options);
  }

  /** Several adds in one call, each with its own scope and tier (default long-term). An
   * invalid item fails alone: its result carries `error`, and the others are stored. */
  addBatch(items: AddArgs[], options?: CallOptions): Promise<AddBatchResponse> {
    const m = this.method("addBatch");
    const request = create(AddBatchRequestSchema, { items: items.map(addRequest) });
    return this.unary(m.name, m.input, m.output, request, options);
  }

  /** The memories relevant to a query. `rateLimited` set means the caller's query rate was
   * reached: `items` are a recent answer to the same request or none, which is not an
   * empty memory (retry later). */
  retrieve(args: RetrieveArgs, options?: CallOptions): Promise<RetrieveResponse> {
    const [scope, { tiers = [], kinds = [], ...rest }] = split(args);
    const m = this.method("retrieve");
    const request = create(m.input, { ...rest, scope, tiers: tiers.map(tier), kinds: kinds.map(kind) });
    return this.unary(m.name, m.input, m.output, request, options);
  }

  get(args: LookupArgs, options?: CallOptions): Promise<GetResponse> {
    const [scope, { tier: t, ...rest }] = split(args);
    const m = this.method("get");
    return this.unary(m.name, m.input, m.output, create(GetRequestSchema, { ...rest, scope, tier: tier(t) }), options);
  }

  delete(args: LookupArgs, options?: CallOptions): Promise<DeleteResponse> {
    const [scope, { tier: t, ...rest }] = split(args);
    const m = this.method("delete");
    return this.unary(m.name, m.input, m.output, create(DeleteRequestSchema, { ...rest, scope, tier: tier(t) }), options);
  }

  prune(args: PruneArgs, options?: CallOptions): Promise<PruneResponse> {
    const [scope, { tiers = [], strategy, ...rest }] = split(args);
    const m = this.method("prune");
    const request = create(PruneRequestSchema, {
      ...rest,
      scope,
      tiers: tiers.map(tier),
      strategy: enumValue(PruneStrategy, "PRUNE_STRATEGY_", strategy),
    });
    return this.unary(m.name, m.input, m.output, request, options);
  }

  /** Every memory of a user: `for await (const item of client.export({ userId }))`. */
  export(args: ExportArgs, options: CallOptions = {}): ExportStream {
    const [scope, { tiers = [], includeArchived = false }] = split(args);
    const m = this.method("export");
    const requestId = options.requestId ?? randomUUID().replace(/-/g, "");
    const stream = this.client.makeServerStreamRequest(
      `/${MemoryService.typeName}/${m.name}`,
      (r: MessageShape<typeof ExportRequestSchema>) => Buffer.from(toBinary(ExportRequestSchema, r)),
      (b: Buffer) => fromBinary(m.output, b),
      create(ExportRequestSchema, { scope, tiers: tiers.map(tier), includeArchived }),
      this.metadata(requestId),
      this.deadline(options.timeoutMs ?? this.streamTimeoutMs),
    );
    return new ExportStream(stream, requestId);
  }

  /** Restore items (e.g. from `export`), idempotent by id: framed with a header and a
   * trailer carrying their item-jcs-v1 checksum, which the server verifies. */
  import(args: { userId: string; items: Iterable<MemoryItem> | AsyncIterable<MemoryItem> }, options: CallOptions = {}): Promise<ImportResponse> {
    const m = this.method("import");
    const requestId = options.requestId ?? randomUUID().replace(/-/g, "");
    return new Promise((resolve, reject) => {
      const call = this.client.makeClientStreamRequest(
        `/${MemoryService.typeName}/${m.name}`,
        (r: MessageShape<typeof ImportRequestSchema>) => Buffer.from(toBinary(ImportRequestSchema, r)),
        (b: Buffer) => fromBinary(m.output, b),
        this.metadata(requestId),
        this.deadline(options.timeoutMs ?? this.streamTimeoutMs),
        (err, reply) => (err ? reject(fromServiceError(err, requestId)) : resolve(reply as ImportResponse)),
      );
      (async () => {
        const header = { userId: args.userId, formatVersion: FORMAT_VERSION };
        call.write(create(ImportRequestSchema, { scope: { userId: args.userId }, payload: { case: "header", value: header } }));
        const sum = new Checksum();
        for await (const item of args.items) {
          sum.add(item);
          call.write(create(ImportRequestSchema, { payload: { case: "item", value: item } }));
        }
        const trailer = { itemCount: BigInt(sum.count), checksumSha256: sum.hexdigest(), checksumFormat: CHECKSUM_FORMAT };
        call.write(create(ImportRequestSchema, { payload: { case: "trailer", value: trailer } }));
        call.end();
      })().catch((err) => {
        call.cancel();
        reject(err);
      });
    });
  }

  usage(args: Scope, options?: CallOptions): Promise<UsageResponse> {
    const [scope] = split(args);
    const m = this.method("usage");
    return this.unary(m.name, m.input, m.output, create(UsageRequestSchema, { scope }), options);
  }

  /** A page of the tenant's users with their usage (reader and admin credentials). */
  listUsers(args: ListUsersArgs = {}, options?: CallOptions): Promise<ListUsersResponse> {
    const m = this.method("listUsers");
    return this.unary(m.name, m.input, m.output, create(ListUsersRequestSchema, args), options);
  }

  /** A page of a user's memories across the stored tiers, filtered. */
  listMemories(args: ListMemoriesArgs, options?: CallOptions): Promise<ListMemoriesResponse> {
    const [scope, { tiers = [], kinds = [], ...rest }] = split(args);
    const m = this.method("listMemories");
    const request = create(ListMemoriesRequestSchema, { ...rest, scope, tiers: tiers.map(tier), kinds: kinds.map(kind) });
    return this.unary(m.name, m.input, m.output, request, options);
  }

  /** The `<memory>` block for a system prompt. With `rateLimited` an empty `context` means
   * the query rate was reached, not that nothing is stored. */
  renderContext(args: RenderContextArgs, options?: CallOptions): Promise<RenderContextResponse> {
    const [scope, { tiers = [], ...rest }] = split(args);
    const m = this.method("renderContext");
    const request = create(RenderContextRequestSchema, { ...rest, scope, tiers: tiers.map(tier) });
    return this.unary(m.name, m.input, m.output, request, options);
  }

  endSession(args: EndSessionArgs, options?: CallOptions): Promise<EndSessionResponse> {
    const [scope, rest] = split(args);
    const m = this.method("endSession");
    return this.unary(m.name, m.input, m.output, create(EndSessionRequestSchema, { ...rest, scope }), options);
  }

  /** grpc.health.v1 Check of the whole server: "SERVING", "NOT_SERVING", ... */
  health(options: CallOptions = {}): Promise<string> {
    const requestId = options.requestId ?? randomUUID().replace(/-/g, "");
    const names = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"];
    return new Promise((resolve, reject) => {
      // HealthCheckRequest{service: ""} is the empty message; the reply is field 1, a varint.
      this.client.makeUnaryRequest(
        "/grpc.health.v1.Health/Check",
        () => Buffer.alloc(0),
        (b: Buffer) => (b.length >= 2 && b[0] === 0x08 ? b[1] : 0),
        {},
        this.metadata(requestId),
        this.deadline(options.timeoutMs ?? this.timeoutMs),
        (err, status) => (err ? reject(fromServiceError(err, requestId)) : resolve(names[status as number] ?? "UNKNOWN")),
      );
    });
  }
}

export { AddRequestSchema, ExportRequestSchema, RetrieveRequestSchema };
