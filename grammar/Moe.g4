// Grammar of the .moe recipe language (contract v0, see docs/language.md).
//
// Newlines are not tokens: every entry starts with a name or '@' and no
// expression can continue with either, so entries separate themselves. The AST
// builder still rejects two entries on one line without ';' between them.
grammar Moe;

file        : topItem* EOF ;
topItem     : importDecl | definition | ';' ;
importDecl  : IMPORT STRING ;
definition  : annotation* kind=(RECIPE | MODEL | GPU | CLUSTER) defName=IDENT (EXTENDS base=IDENT)? block ;
block       : '{' (entry | ';')* '}' ;
entry       : annotation* path '=' expr        # assignEntry
            | annotation* name block           # sectionEntry
            ;
annotation  : '@' IDENT ('(' (arg (',' arg)* ','?)? ')')? ;
path        : name ('.' name)* ;
// Definition keywords are ordinary names inside a block: `model = x`,
// `cluster { gpu = h100_sxm }`, `cp = model.layers / 2`.
name        : IDENT | RECIPE | MODEL | GPU | CLUSTER ;

expr        : op=('-' | '+') expr                     # unaryExpr
            | lhs=expr op=('*' | '/' | '%') rhs=expr  # binaryExpr
            | lhs=expr op=('+' | '-') rhs=expr        # binaryExpr
            | primary                                 # primaryExpr
            ;
primary     : INT                                        # intLit
            | FLOAT                                      # floatLit
            | QUANTITY                                   # quantityLit
            | STRING                                     # stringLit
            | (TRUE | FALSE)                             # boolLit
            | SWEEP list                                 # sweepExpr
            | IDENT '(' (arg (',' arg)* ','?)? ')'       # callExpr
            | path                                       # pathExpr
            | list                                       # listExpr
            | '(' expr ')'                               # parenExpr
            ;
list        : '[' (expr (',' expr)* ','?)? ']' ;
arg         : (name '=')? expr ;

IMPORT   : 'import' ;
RECIPE   : 'recipe' ;
MODEL    : 'model' ;
GPU      : 'gpu' ;
CLUSTER  : 'cluster' ;
EXTENDS  : 'extends' ;
SWEEP    : 'sweep' ;
TRUE     : 'true' ;
FALSE    : 'false' ;

// A number glued to letters is a quantity; the unit is checked by Sema so that
// an unknown unit gets a located "unknown unit" error rather than a lexer error.
QUANTITY : NUMBER [A-Za-z]+ ('/' 's')? ;
FLOAT    : DIGITS '.' DIGITS EXPONENT? | DIGITS EXPONENT ;
INT      : DIGITS ;
IDENT    : [A-Za-z_] [A-Za-z0-9_]* ;
STRING   : '"' ( '\\' . | ~["\\\r\n] )* '"' ;
UNTERMINATED_STRING : '"' ( '\\' . | ~["\\\r\n] )* ;

LBRACE : '{' ; RBRACE : '}' ; LPAREN : '(' ; RPAREN : ')' ;
LBRACK : '[' ; RBRACK : ']' ;

COMMENT  : '#' ~[\r\n]* -> channel(HIDDEN) ;
// Whitespace is dropped rather than kept on the hidden channel: nothing
// reads it, and on a large file it is half of the tokens ANTLR allocates.
WS       : [ \t\r\n]+ -> skip ;
// Anything else becomes one token the parser cannot use, so the error is
// reported where the stray character is.
STRAY    : . ;

fragment NUMBER   : DIGITS ('.' DIGITS)? EXPONENT? ;
fragment DIGITS   : [0-9] ('_'? [0-9])* ;
fragment EXPONENT : [eE] [+-]? [0-9]+ ;
