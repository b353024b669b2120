//! A strict little XML reader for the tests: quick-xml events into a tree
//! of elements with their attributes and text, entities resolved.

use quick_xml::XmlVersion;
use quick_xml::events::Event;

/// An element of the parsed page.
#[derive(Debug, Default)]
pub(super) struct El {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<El>,
    /// Text directly inside, entities resolved.
    pub text: String,
}

impl El {
    pub(super) fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
    pub(super) fn num(&self, key: &str) -> f64 {
        self.attr(key).unwrap_or_else(|| panic!("{} has no {key}", self.name)).parse().unwrap()
    }
    pub(super) fn has_class(&self, class: &str) -> bool {
        self.attr("class").is_some_and(|c| c.split(' ').any(|x| x == class))
    }
    /// Every descendant (self included) accepted by `pred`, document order.
    pub(super) fn all<'a>(&'a self, pred: &dyn Fn(&El) -> bool) -> Vec<&'a El> {
        let mut out = Vec::new();
        fn walk<'a>(e: &'a El, pred: &dyn Fn(&El) -> bool, out: &mut Vec<&'a El>) {
            if pred(e) {
                out.push(e);
            }
            for c in &e.children {
                walk(c, pred, out);
            }
        }
        walk(self, pred, &mut out);
        out
    }
    pub(super) fn named<'a>(&'a self, name: &str) -> Vec<&'a El> {
        self.all(&|e| e.name == name)
    }
    /// All text inside, descendants included.
    pub(super) fn all_text(&self) -> String {
        let mut s = self.text.clone();
        for c in &self.children {
            s.push_str(&c.all_text());
        }
        s
    }
}

/// Parses `xml` strictly (matching end tags, valid attributes, only the five
/// XML entities and character references) into a tree under a `#doc` root.
pub(super) fn parse(xml: &str) -> El {
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let mut stack = vec![El { name: "#doc".into(), ..El::default() }];
    loop {
        let event = reader.read_event();
        let at = reader.error_position();
        let context = || xml.get(at as usize..).unwrap_or("").chars().take(80).collect::<String>();
        let open = |s: &quick_xml::events::BytesStart| {
            let attrs = s
                .attributes()
                .map(|a| {
                    let a = a.unwrap_or_else(|e| panic!("attribute error {e} near {}", context()));
                    let v = a
                        .normalized_value(XmlVersion::Implicit1_0)
                        .unwrap_or_else(|e| panic!("{e} near {}", context()));
                    (a.key.0.to_string(), v.into_owned())
                })
                .collect();
            El { name: s.name().0.to_string(), attrs, ..El::default() }
        };
        match event {
            Err(e) => panic!("XML error at {at}: {e} near {}", context()),
            Ok(Event::Eof) => break,
            Ok(Event::Start(s)) => stack.push(open(&s)),
            Ok(Event::Empty(s)) => {
                let el = open(&s);
                stack.last_mut().unwrap().children.push(el);
            }
            Ok(Event::End(_)) => {
                let el = stack.pop().unwrap();
                stack.last_mut().expect("more end tags than start tags").children.push(el);
            }
            Ok(Event::Text(t)) => stack.last_mut().unwrap().text.push_str(&t.xml10_content()),
            Ok(Event::GeneralRef(r)) => {
                let ch = if r.is_char_ref() {
                    r.resolve_char_ref().unwrap().unwrap()
                } else {
                    match &*r.xml10_content() {
                        "amp" => '&',
                        "lt" => '<',
                        "gt" => '>',
                        "quot" => '"',
                        "apos" => '\'',
                        other => panic!("entity &{other}; is not XML"),
                    }
                };
                stack.last_mut().unwrap().text.push(ch);
            }
            Ok(Event::DocType(_) | Event::Decl(_) | Event::Comment(_)) => {}
            Ok(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(stack.len(), 1, "unclosed elements: {:?}", stack.iter().map(|e| &e.name).collect::<Vec<_>>());
    stack.pop().unwrap()
}
