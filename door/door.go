// Package door is the kit of Spine's front doors, the HTTP servers of spine
// serve (package service) and spine mcp --http: what both do the same way
// lives here, once.
//
//   - Tokens and owners: Tenants are the tokens a door takes, resolved
//     once (NewTenants): Identify finds a request's among them, compared in
//     constant time; Require lets in only requests with one and names it
//     for the log (TokenName, RequestToken); Owner keys the sessions a
//     token makes; ShareOf is what an owner may take of the Runner's
//     sessions (Shares), the door's and the store.
//   - The access log: AccessLog, one line (and a span) per request, with
//     its id (RequestIDHeader), token name, session and error kind.
//   - Probes and the drain: ServeLive, ServeReady (503 once draining),
//     RefuseWhileDraining, DownComponents for /readyz's detail, and
//     RunnerCollector for /metrics.
//   - Logs clipped: ClipLogs cuts every text of a record to MaxLogText.
//   - The answer: Response, the body of every run's answer and of every
//     refused request, which spine run --json prints too, and ErrorOf, how
//     a run's error (spine.Classify's Outcome) is told in it.
package door
