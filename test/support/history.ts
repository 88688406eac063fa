/**
 * Workflow histories: read from a run (its local-activity markers), replayed against the current
 * code, and kept as JSON files in the form Temporal's tools write
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
import type { Client } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import proto from '@temporalio/proto';
import { patchProtobufRoot } from '@temporalio/proto/lib/patch-protobuf-root.js';
import { Worker } from '@temporalio/worker';
import { expect } from 'vitest';
import { workflowBundlePath } from './env.ts';

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

type HistoryEvent = proto.temporal.api.history.v1.IHistoryEvent;

/** The summary the workflow gave an activity or local activity (shown by the Temporal UI). */
export function summaryOf(e: HistoryEvent): string {
  const data = e.userMetadata?.summary?.data;
  return data ? (JSON.parse(Buffer.from(data).toString('utf8')) as string) : '';
}

/** Local activities leave a marker per completed call, not scheduled/started/completed events. */
export function localActivityMarkers(events: HistoryEvent[]): HistoryEvent[] {
  return events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity');
}

/** A local activity's marker data: its type and the attempt that finished it. */
function markerData(e: HistoryEvent): { activity_type: string; attempt: number } | undefined {
  const m = e.markerRecordedEventAttributes;
  const payload = m?.markerName === 'core_local_activity' ? m.details?.data?.payloads?.[0] : undefined;
  return payload
    ? (defaultPayloadConverter.fromPayload(payload) as { activity_type: string; attempt: number })
    : undefined;
}

/** The finished attempts of a step that runs as a local activity (one marker each, retried ones too). */
export function localCalls(
  events: HistoryEvent[],
  activityType: string,
): { activity_type: string; attempt: number }[] {
  return events.map(markerData).filter((d) => d?.activity_type === activityType) as {
    activity_type: string;
    attempt: number;
  }[];
}

/** The workflows' histories replay against the run's workflow bundle (the current code) without an error. */
export async function expectReplays(client: Client, workflowIds: string[]): Promise<void> {
  const histories = await Promise.all(
    workflowIds.map(async (workflowId) => ({
      workflowId,
      history: await client.workflow.getHandle(workflowId).fetchHistory(),
    })),
  );
  let replayed = 0;
  for await (const result of Worker.runReplayHistories(
    { workflowBundle: { codePath: workflowBundlePath() } },
    histories,
  )) {
    expect(result.error, `${result.workflowId}: ${String(result.error)}`).toBeUndefined();
    replayed++;
  }
  expect(replayed).toBe(workflowIds.length);
}
