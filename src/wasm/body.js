// Reads a response body to its end, handing each chunk to `onChunk`, which
// returns false to stop reading. One call into wasm per chunk: awaiting each
// read() from Rust cost a promise-to-future bridge and two closures per chunk,
// and a live answer arrives as thousands of small chunks.
// Resolves true at the end of the body, false when stopped; rejects as read()
// does (abort, network error).
export async function pumpBody(reader, onChunk) {
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return true;
    if (!onChunk(value)) {
      reader.cancel().catch(() => {});
      return false;
    }
  }
}
