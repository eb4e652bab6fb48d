// Package fromenv builds the model provider that a program's environment
// names, so that one program runs on OpenAI, on Anthropic or on a local
// server such as Ollama without a change to its code:
//
//	model, about, err := fromenv.New(os.Getenv)
//	if err != nil {
//		log.Fatal(err) // says which variable to set
//	}
//	fmt.Println(about) // provider: openai (gpt-5.4-mini)
//
// # Variables
//
//	Variable            Meaning
//	DEPUTY_PROVIDER     openai or anthropic, in any case; may stay unset
//	                    when OPENAI_BASE_URL is set
//	OPENAI_API_KEY      the API key; not needed with OPENAI_BASE_URL
//	OPENAI_BASE_URL     an OpenAI-compatible server, e.g. Ollama at
//	                    http://localhost:11434/v1; setting it asks for openai
//	OPENAI_MODEL        the model (default openai.DefaultModel); required
//	                    with OPENAI_BASE_URL, which serves models of its own
//	ANTHROPIC_API_KEY   the API key; not needed with ANTHROPIC_BASE_URL
//	ANTHROPIC_BASE_URL  an Anthropic-compatible server
//	ANTHROPIC_MODEL     the model (default anthropic.DefaultModel)
//
// For example:
//
//	OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_MODEL=qwen3   a local model, no key
//	DEPUTY_PROVIDER=openai OPENAI_API_KEY=sk-...                   OpenAI
//	DEPUTY_PROVIDER=anthropic ANTHROPIC_API_KEY=sk-ant-...         Anthropic
//
// New reads these variables only through the getenv func it is given, so a
// test passes a map's lookup and never depends on the process's
// environment; what getenv returns wins over the process's environment.
// The vendor SDKs still read a few variables of their own from the process,
// such as OPENAI_ORG_ID and ANTHROPIC_AUTH_TOKEN; see their documentation.
//
// An environment that names no provider is not an error a program must
// stop on: New reports it as ErrNoProvider, so that a program can fall back
// to a provider of its own, such as a scripted one.
package fromenv
