// Typed errors for failed calls, with the google.rpc details memoryd sends in the
// grpc-status-details-bin trailer (BadRequest, QuotaFailure, RetryInfo, ErrorInfo).
import { fromBinary, createRegistry, type Message } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { status as Status, type ServiceError } from "@grpc/grpc-js";
import { StatusSchema } from "./gen/google/rpc/status_pb.js";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  QuotaFailureSchema,
  RetryInfoSchema,
  type BadRequest,
  type ErrorInfo,
  type QuotaFailure,
  type RetryInfo,
} from "./gen/google/rpc/error_details_pb.js";

const registry = createRegistry(BadRequestSchema, QuotaFailureSchema, RetryInfoSchema, ErrorInfoSchema);

export interface FieldViolation {
  field: string;
  description: string;
}

/** A failed call: `code` (gRPC status), the server's `message`, its ErrorInfo `reason` and
 * `errorMetadata`, every unpacked detail and the `requestId` the call was sent with. */
export class MemorydError extends Error {
  readonly reason: string;
  readonly errorMetadata: Record<string, string>;
  constructor(
    readonly code: Status,
    message: string,
    readonly details: Message[],
    readonly requestId: string,
  ) {
    super(`${Status[code]}: ${message}`);
    this.name = new.target.name;
    const info = this.detail<ErrorInfo>("google.rpc.ErrorInfo");
    this.reason = info?.reason ?? "";
    this.errorMetadata = { ...(info?.metadata ?? {}) };
  }

  detail<T extends Message>(typeName: string): T | undefined {
    return this.details.find((d) => d.$typeName === typeName) as T | undefined;
  }
}

export class InvalidArgument extends MemorydError {
  get violations(): FieldViolation[] {
    const bad = this.detail<BadRequest>("google.rpc.BadRequest");
    return (bad?.fieldViolations ?? []).map((v) => ({ field: v.field, description: v.description }));
  }
  /** The first field at fault, e.g. "top_k". */
  get field(): string | undefined {
    return this.violations[0]?.field;
  }
}

export class QuotaExceeded extends MemorydError {
  /** The limit reached. */
  get max(): number | undefined {
    const limit = this.errorMetadata["limit"];
    return limit === undefined ? undefined : Number(limit);
  }
  get limitName(): string | undefined {
    return this.errorMetadata["limit_name"];
  }
  get subject(): string | undefined {
    return this.detail<QuotaFailure>("google.rpc.QuotaFailure")?.violations[0]?.subject;
  }
}

function retryAfter(error: MemorydError): number | undefined {
  const delay = error.detail<RetryInfo>("google.rpc.RetryInfo")?.retryDelay;
  return delay === undefined ? undefined : Number(delay.seconds) + delay.nanos / 1e9;
}

export class RateLimited extends MemorydError {
  /** Seconds the server advises to wait. */
  get retryAfter(): number | undefined {
    return retryAfter(this);
  }
}

export class Unavailable extends MemorydError {
  get retryAfter(): number | undefined {
    return retryAfter(this);
  }
}

export class NotFound extends MemorydError {}
export class FailedPrecondition extends MemorydError {}
export class Unauthenticated extends MemorydError {}
export class PermissionDenied extends MemorydError {}
export class DeadlineExceeded extends MemorydError {}
export class Unimplemented extends MemorydError {}
export class Internal extends MemorydError {}

/** An export stream whose trailer does not match the items received. */
export class ExportCorrupt extends Error {}

const classOf: Partial<Record<Status, typeof MemorydError>> = {
  [Status.INVALID_ARGUMENT]: InvalidArgument,
  [Status.OUT_OF_RANGE]: InvalidArgument,
  [Status.RESOURCE_EXHAUSTED]: QuotaExceeded,
  [Status.UNAVAILABLE]: Unavailable,
  [Status.NOT_FOUND]: NotFound,
  [Status.FAILED_PRECONDITION]: FailedPrecondition,
  [Status.UNAUTHENTICATED]: Unauthenticated,
  [Status.PERMISSION_DENIED]: PermissionDenied,
  [Status.DEADLINE_EXCEEDED]: DeadlineExceeded,
  [Status.UNIMPLEMENTED]: Unimplemented,
};

function unpack(error: ServiceError): Message[] {
  const raw = error.metadata?.get("grpc-status-details-bin")[0];
  if (!(raw instanceof Buffer)) return [];
  try {
    const status = fromBinary(StatusSchema, raw);
    return status.details.flatMap((any) => {
      const message = anyUnpack(any, registry);
      return message ? [message] : [];
    });
  } catch {
    return [];
  }
}

/** The typed error for a failed gRPC call. */
export function fromServiceError(error: ServiceError, requestId: string): MemorydError {
  const details = unpack(error);
  let cls = classOf[error.code] ?? Internal;
  if (cls === QuotaExceeded) {
    const limited = details.some(
      (d) =>
        d.$typeName === "google.rpc.RetryInfo" ||
        (d.$typeName === "google.rpc.ErrorInfo" && (d as ErrorInfo).reason === "RATE_LIMITED"),
    );
    if (limited) cls = RateLimited;
  }
  return new cls(error.code, error.details ?? error.message, details, requestId);
}
