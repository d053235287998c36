// The Streams Standard (web-streams-polyfill, from the reference
// implementation), installed lazily as the stream globals.
export {
  ReadableStream, ReadableStreamDefaultReader, ReadableStreamBYOBReader,
  ReadableStreamDefaultController, ReadableByteStreamController, ReadableStreamBYOBRequest,
  WritableStream, WritableStreamDefaultWriter, WritableStreamDefaultController,
  TransformStream, TransformStreamDefaultController,
  ByteLengthQueuingStrategy, CountQueuingStrategy,
} from "web-streams-polyfill";
