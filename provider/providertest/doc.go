// Package providertest checks that a provider.Provider keeps the contract
// that deputy's agents rely on, in the way testing/slogtest checks a
// slog.Handler. A new provider proves itself with one call:
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, newProvider)
//	}
//
// # Driving the provider under test
//
// The suite plays the model. For each check it writes a Script: the replies
// the model gives, in order. Run calls newProvider(t, s) for a fresh provider
// whose backend answers from s:
//
//   - For every model call it receives, the backend calls s.Next(req) once,
//     with the request as the model saw it in the provider vocabulary, and
//     answers as the returned Reply says: with Reply.Text and Reply.ToolCalls
//     (keeping their IDs) and reporting Reply.Usage; with an error of HTTP
//     status Reply.Status; or, for Reply.Stall, by holding the call open
//     (a stream first sends Reply.Text) until the caller gives up.
//   - A provider that retries must be built with retries off: every call
//     takes the next reply, and a call beyond the script fails the check.
//
// An in-memory provider, such as a scripted fake, adopts the suite by
// answering with Complete and Stream, which implement a Reply's meaning:
//
//	providertest.Run(t, func(t *testing.T, s *providertest.Script) provider.Provider {
//		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
//			return providertest.Complete(ctx, s.Next(req))
//		})
//	})
//
// A fake that streams does the same in its Stream method with
// providertest.Stream(ctx, s.Next(req), onDelta). A fake built from a
// list of canned responses can instead be given a responder that calls
// s.Next and converts the Reply: Reply.Response for an answer, Reply.Err
// for a failure.
//
// A provider over a vendor's HTTP API is tested against a local
// net/http/httptest server that decodes each request body into a
// provider.Request, calls s.Next, and writes the Reply in the vendor's wire
// format: a JSON body, an SSE stream when the request asked for one, or the
// vendor's error body with Reply.Status. The tests of provider/openai and
// provider/anthropic are worked examples.
//
// # The checks
//
//   - Text: a plain answer comes back as an assistant message with
//     StopEndTurn and the model's usage (Requests is 1); the request reaches
//     the model with its system prompt and messages intact.
//   - ToolRoundTrip: the model calls a tool; the response carries the call
//     (ID, name, arguments) with StopToolUse; the next request carries the
//     assistant's call and the tool's result, and the model's answer comes
//     back.
//   - ParallelToolCalls: two calls in one turn, answered by two tool
//     messages in one request.
//   - Conversation: Conversation() reaches the model intact.
//   - Errors: statuses 400, 401, 403, 429, 500 and 503 come back as a
//     *provider.Error (found with errors.As) with that StatusCode and the
//     kind provider.KindForStatus gives, from Complete and from Stream.
//   - Cancel: cancelling the context of a call that the model holds open
//     makes Complete, and a Stream that has started, return promptly with an
//     error for which errors.Is(err, context.Canceled) holds; so does a call
//     whose context was cancelled before it started.
//   - Stream: for a provider that implements provider.Streamer, the
//     Response Stream returns equals what Complete returns for the same
//     reply, the text deltas add up to its text, and the tool-call deltas (ID
//     and name first, then arguments) add up to its tool calls; every delta
//     arrives before Stream returns. An error from the callback stops the
//     stream and is what Stream returns; a nil callback is allowed.
//
// Requests are compared as the model received them on System, Messages and
// Tools, arguments and schemas by their JSON meaning. Message.IsError is not
// compared, because not every API can carry it.
package providertest
