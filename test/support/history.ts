/**
 * Workflow histories as JSON files, in the form Temporal's tools write
 * (`temporal workflow show --output json`, the SDK's historyToJSON).
 *
 * Why not the SDK's own historyToJSON/historyFromJSON (@temporalio/common)?
 * They run protobufjs's protojson from @temporalio/common's copy of protobufjs
 * on types built by @temporalio/proto's copy. When npm installs the two
 * copies separately, as this lockfile does (a protobufjs 7 sits at the top
 * level), protojson's `instanceof Type` check fails: "type must be a Type".
 * Here protojson comes from the copy @temporalio/proto itself loads, so the
 * check holds however the packages are laid out.
 */
import { createRequire } from 'node:module';
import proto from '@temporalio/proto';
import { patchProtobufRoot } from '@temporalio/proto/lib/patch-protobuf-root.js';

type History = proto.temporal.api.history.v1.IHistory;

interface ProtoJson {
  toJson(type: unknown, message: unknown): unknown;
  fromJson(type: unknown, json: unknown, options?: { ignoreUnknownFields?: boolean }): unknown;
}

const requireFromProto = createRequire(createRequire(import.meta.url).resolve('@temporalio/proto'));
const protojson = requireFromProto('protobufjs/ext/protojson') as ProtoJson;
// The patched root is a protobufjs Root at run time; its declared type is the generated namespace.
const root = patchProtobufRoot(proto) as unknown as { lookupType(name: string): unknown };
const historyType = root.lookupType('temporal.api.history.v1.History');

/** A history (as fetchHistory() returns it) in Temporal's JSON form. */
export function historyToJSON(history: History): unknown {
  return protojson.toJson(historyType, proto.temporal.api.history.v1.History.fromObject(history));
}

/** A history in Temporal's JSON form, ready for Worker.runReplayHistories. */
export function historyFromJSON(json: unknown): History {
  const loaded = protojson.fromJson(historyType, json, { ignoreUnknownFields: true });
  if (!loaded) throw new TypeError('not a workflow history');
  return loaded as History;
}
