// Progressive enhancement: show the Copy buttons and copy their command to the clipboard.
// Without JavaScript the commands are plain selectable text.
(function () {
  "use strict";
  function copied(button, ok) {
    var label = button.textContent;
    button.textContent = ok ? "Copied" : "Copy failed";
    button.classList.toggle("done", ok);
    setTimeout(function () { button.textContent = label; button.classList.remove("done"); }, 1500);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.documentElement.classList.add("js");
    var buttons = document.querySelectorAll("button.copy[data-copy]");
    Array.prototype.forEach.call(buttons, function (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        var text = button.getAttribute("data-copy");
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(text).then(function () { copied(button, true); },
                                                   function () { copied(button, false); });
        } else {
          copied(button, false);
        }
      });
    });
  });
})();
