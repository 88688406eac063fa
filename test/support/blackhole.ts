/**
 * A TCP server on loopback that accepts connections and never answers: a
 * Temporal frontend (or a provider) that hangs. A client pointed at it
 * connects, sends its request and waits until its own deadline, which is
 * what an overloaded or partitioned server looks like from our side.
 */
import net from 'node:net';

export interface Blackhole {
  /** host:port, e.g. for TEMPORAL_ADDRESS or a gRPC connection. */
  address: string;
  port: number;
  /** Connections accepted so far (so a test can see that the client really tried). */
  accepted(): number;
  close(): Promise<void>;
}

export async function startBlackhole(): Promise<Blackhole> {
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  const server = net.createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    // Read and drop whatever arrives; never write a byte back.
    socket.resume();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    address: `127.0.0.1:${port}`,
    port,
    accepted: () => accepted,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
