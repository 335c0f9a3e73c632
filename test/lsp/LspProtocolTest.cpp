//===- LspProtocolTest.cpp - Positions, URIs and framing ------------------===//
#include "moec/Lsp/Protocol.h"
#include "moec/Lsp/Transport.h"

#include "gtest/gtest.h"
#include <sstream>

using namespace moec::lsp;

TEST(LineTable, Utf16ColumnsAndClamping) {
  // "é" is 2 bytes and 1 UTF-16 unit; "😀" is 4 bytes and 2 units.
  std::string Text = "ab\nxé😀z\r\nlast";
  LineTable T(Text);
  EXPECT_EQ(T.position(0).Line, 0u);
  size_t Z = Text.find('z');
  Position P = T.position(Z);
  EXPECT_EQ(P.Line, 1u);
  EXPECT_EQ(P.Character, 4u); // x, é, two units of the emoji
  EXPECT_EQ(T.offset(P), Z);
  // Inside the surrogate pair: the offset stays before the emoji.
  EXPECT_EQ(T.offset({1, 3}), Text.find("😀"));
  // Past the end of a line: clamped to the line end (before "\n").
  EXPECT_EQ(T.offset({0, 99}), 2u);
  EXPECT_EQ(T.offset({9, 0}), Text.size());
  EXPECT_EQ(T.position(Text.size()).Line, 2u);
  EXPECT_EQ(T.position(Text.size()).Character, 4u);
}

TEST(URI, RoundTripWithEscapes) {
  EXPECT_EQ(pathToURI("/a b/c#d.moe"), "file:///a%20b/c%23d.moe");
  EXPECT_EQ(uriToPath("file:///a%20b/c%23d.moe").getValue(), "/a b/c#d.moe");
  EXPECT_EQ(uriToPath("file://localhost/x.moe").getValue(), "/x.moe");
  EXPECT_FALSE(uriToPath("untitled:Untitled-1"));
  EXPECT_FALSE(uriToPath("file:///bad%2"));
  EXPECT_FALSE(uriToPath("file://otherhost/x"));
}

TEST(Transport, FramingAndBadHeaders) {
  std::string Body = R"({"a":1})";
  std::stringstream In;
  In << "Content-Length: " << Body.size() << "\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n"
     << Body << "Content-Length: abc\r\n\r\n"
     << "X-Nothing: 1\r\n\r\n"
     << "content-length: 2\n\n{}"
     << "Content-Length: 50\r\n\r\n{\"truncated";
  IncomingMessage M = readMessage(In);
  ASSERT_EQ(M.K, IncomingMessage::Kind::Message);
  EXPECT_EQ(M.Body, Body);
  M = readMessage(In);
  EXPECT_EQ(M.K, IncomingMessage::Kind::BadHeader);
  EXPECT_NE(M.Error.find("not a number"), std::string::npos);
  M = readMessage(In);
  EXPECT_EQ(M.K, IncomingMessage::Kind::BadHeader);
  EXPECT_NE(M.Error.find("missing Content-Length"), std::string::npos);
  M = readMessage(In); // bare "\n" line ends and a lower-case name are accepted
  ASSERT_EQ(M.K, IncomingMessage::Kind::Message);
  EXPECT_EQ(M.Body, "{}");
  M = readMessage(In); // the input ends inside the body
  EXPECT_EQ(M.K, IncomingMessage::Kind::End);
}

TEST(Transport, OversizedBodyIsSkipped) {
  std::stringstream In;
  In << "Content-Length: 10\r\n\r\n0123456789Content-Length: 2\r\n\r\n[]";
  IncomingMessage M = readMessage(In, /*MaxBody=*/5);
  EXPECT_EQ(M.K, IncomingMessage::Kind::BadHeader);
  M = readMessage(In, 5);
  ASSERT_EQ(M.K, IncomingMessage::Kind::Message);
  EXPECT_EQ(M.Body, "[]");
}

TEST(Transport, WritesContentLength) {
  std::string Out;
  llvm::raw_string_ostream OS(Out);
  writeMessage(OS, llvm::json::Object{{"x", "é"}});
  EXPECT_EQ(OS.str(), "Content-Length: 10\r\n\r\n{\"x\":\"é\"}");
}
