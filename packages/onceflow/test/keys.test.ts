import { describe, expect, it } from 'vitest';
import { stepKey } from '../src/index.ts';
import * as workflowEntry from '../src/workflow.ts';

describe('stepKey', () => {
  it('joins the workflow ID, the step and its parts with "/"', () => {
    expect(stepKey('renewal/acme/sub_1/2026-12', 'charge')).toBe('renewal/acme/sub_1/2026-12/charge');
    expect(stepKey('wf', 'status', 'paid', 'redrive-2')).toBe('wf/status/paid/redrive-2');
    expect(stepKey('wf', 'attempt', 3)).toBe('wf/attempt/3');
  });

  it('refuses a step name or part with "/" or outside visible ASCII, so two steps never share a key', () => {
    expect(() => stepKey('wf', 'a/b')).toThrow(TypeError);
    expect(() => stepKey('wf', 'status', 'x/y')).toThrow(TypeError);
    expect(() => stepKey('wf', '')).toThrow(TypeError);
    expect(() => stepKey('wf', 'caf\u00e9')).toThrow(TypeError);
    expect(() => stepKey('wf', 'x'.repeat(65))).toThrow(TypeError);
  });

  it('onceflow/workflow publishes the same stepKey and the failure types, and nothing else', () => {
    expect(Object.keys(workflowEntry).sort()).toEqual(['LEDGER_FAILURE', 'stepKey']);
    expect(workflowEntry.stepKey).toBe(stepKey);
  });
});
