export * from "./client.js";
export * from "./errors.js";
export * from "./exportFormat.js";
export * as pb from "./gen/memoryd/v1/memory_pb.js";
export { Tier, Kind, Role, Source, PruneStrategy, Operation } from "./gen/memoryd/v1/memory_pb.js";
export type {
  AddResponse,
  DeleteResponse,
  GetResponse,
  ImportResponse,
  MemoryItem,
  PruneResponse,
  RenderContextResponse,
  RetrieveResponse,
  UsageResponse,
} from "./gen/memoryd/v1/memory_pb.js";
