// Errors OpenClaw shows the caller as they are. Its gateway passes the message of an error named
// ToolInputError (HTTP 400) or ToolAuthorizationError (403) through to `/tools/invoke` and to the model;
// any other error becomes a bare "tool execution failed" (500). A plugin cannot import OpenClaw's class
// without depending on OpenClaw's package, so these carry the same names and statuses.
export class ToolInputError extends Error {
  constructor(message) {
    super(message);
    this.name = "ToolInputError";
    this.status = 400;
  }
}

export class ToolAuthorizationError extends Error {
  constructor(message) {
    super(message);
    this.name = "ToolAuthorizationError";
    this.status = 403;
  }
}
