/** The readers of one variable each (src/config/env.ts): unset or empty is the default, anything else parses or is refused by name. */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { configRefusal as refusal } from '../support/config.ts';
import { duration, nonNegativeInt, oneOf, onOff, port, positiveInt } from '../../src/config/env.ts';

describe('config readers', () => {
  it('take the default when the variable is unset or empty', () => {
    for (const env of [{}, { X: '' }]) {
      expect(positiveInt(env, 'X', 7)).toBe(7);
      expect(nonNegativeInt(env, 'X', 7)).toBe(7);
      expect(duration(env, 'X', 7)).toBe(7);
      expect(port(env, 'X', 7)).toBe(7);
      expect(onOff(env, 'X', true)).toBe(true);
      expect(oneOf(env, 'X', ['a', 'b'], 'b')).toBe('b');
    }
  });

  it('read integers at their bounds', () => {
    expect(positiveInt({ X: '1' }, 'X', 7)).toBe(1);
    expect(nonNegativeInt({ X: '0' }, 'X', 7)).toBe(0);
    expect(duration({ X: '250' }, 'X', 7)).toBe(250);
    expect(port({ X: '65535' }, 'X', 7)).toBe(65535);
  });

  it('refuse what is out of bounds, fractional, unsafe or not a number, naming the variable and the value', () => {
    expect(refusal(() => positiveInt({ N: '0' }, 'N', 7))).toBe('N must be a positive integer, got "0"');
    expect(refusal(() => nonNegativeInt({ N: '-1' }, 'N', 7))).toBe(
      'N must be a non-negative integer, got "-1"',
    );
    expect(refusal(() => duration({ N: '1.5' }, 'N', 7))).toBe(
      'N must be a positive number of milliseconds, got "1.5"',
    );
    expect(refusal(() => duration({ N: '1e21' }, 'N', 7))).toMatch(/^N must be a positive number/);
    expect(refusal(() => port({ N: '65536' }, 'N', 7))).toBe(
      'N must be a port number (1-65535), got "65536"',
    );
    expect(refusal(() => positiveInt({ N: 'ten' }, 'N', 7))).toMatch(/^N must be a positive integer/);
  });

  it('read on/off and one of a set, and refuse anything else', () => {
    expect(onOff({ X: 'off' }, 'X', true)).toBe(false);
    expect(onOff({ X: '1' }, 'X', false)).toBe(true);
    expect(refusal(() => onOff({ X: 'yes' }, 'X', true))).toBe('X must be on or off, got "yes"');
    expect(oneOf({ X: 'a' }, 'X', ['a', 'b'], 'b')).toBe('a');
    expect(refusal(() => oneOf({ X: 'c' }, 'X', ['a', 'b'], 'b'))).toBe('X must be one of a, b; got "c"');
  });

  it('LOG_LEVEL is one of four levels, info when unset or empty', () => {
    expect(loadConfig({}).logLevel).toBe('info');
    expect(loadConfig({ LOG_LEVEL: '' }).logLevel).toBe('info');
    expect(loadConfig({ LOG_LEVEL: 'debug' }).logLevel).toBe('debug');
    expect(refusal(() => loadConfig({ LOG_LEVEL: 'verbose' }))).toBe(
      'LOG_LEVEL must be one of debug, info, warn, error; got "verbose"',
    );
  });

  it('OTEL_EXPORTER_OTLP_ENDPOINT is an http(s) URL, or unset', () => {
    expect(loadConfig({}).tracing.otlpEndpoint).toBeUndefined();
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: ' http://127.0.0.1:4318 ' }).tracing.otlpEndpoint).toBe(
      'http://127.0.0.1:4318',
    );
    for (const bad of ['127.0.0.1:4318', 'not a url', 'ftp://collector']) {
      expect(refusal(() => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: bad }))).toBe(
        `OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, got ${JSON.stringify(bad)}`,
      );
    }
  });
});
